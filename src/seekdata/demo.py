"""``python -m seekdata.demo``: the README's preempted DDP job (:mod:`seekdata.tools.demo`).

Kept at this path so that the README's one command stays what it was; the demo lives with
the other tools.
"""

import sys

from seekdata.tools.demo import main

if __name__ == "__main__":
    sys.exit(main())
