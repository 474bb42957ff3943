"""``python -m seekdata``: the ``seekdata`` command (:mod:`seekdata.tools.cli`)."""

import sys

from seekdata.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
