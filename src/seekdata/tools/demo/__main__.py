"""``python -m seekdata.tools.demo``: the same as ``python -m seekdata.demo``."""

import sys

from seekdata.tools.demo.preempted import main

if __name__ == "__main__":
    sys.exit(main())
