"""``python -m seekdata.demo``: the README's preempted DDP job (:mod:`seekdata.tools.demo`).

Kept at this path so that the README's one command stays what it was; the demos live with
the other tools, in one package with one torchrun supervisor.
"""

import sys

from seekdata.tools.demo.preempted import main

if __name__ == "__main__":
    sys.exit(main())
