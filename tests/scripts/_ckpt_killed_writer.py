"""A writer to kill mid-save, for tests/checkpoint/test_checkpoint.py: ``python THIS PATH MARK``.

Starts ``seekdata.checkpoint.save(obj, PATH)`` with an object whose pickling writes MARK and
then blocks, so that the test can ``kill -9`` it while its temporary file exists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from seekdata.checkpoint import save


class Blocks:
    def __reduce__(self) -> tuple:
        Path(sys.argv[2]).write_text("writing")
        time.sleep(120)
        return (int, ())


if __name__ == "__main__":
    save({"w": torch.zeros(1024), "then": Blocks()}, sys.argv[1])
