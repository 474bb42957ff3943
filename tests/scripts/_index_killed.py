"""``seekdata index`` in a process that kills itself with SIGKILL after it has written ``k``
shard indexes: a build killed half-way, as a machine lost mid-build would leave it.

Usage: python _index_killed.py K ARGS... (the command's arguments after ``seekdata``)."""

from __future__ import annotations

import os
import signal
import sys

from seekdata.sources.files import indexes
from seekdata.tools.cli import main

if __name__ == "__main__":
    k, argv = int(sys.argv[1]), sys.argv[2:]
    written = 0
    write = indexes.write_atomic

    def counting(path: str, data: bytes) -> None:
        global written
        write(path, data)  # whole, renamed into place: what a kill after it leaves behind
        written += 1
        if written == k:
            os.kill(os.getpid(), signal.SIGKILL)

    indexes.write_atomic = counting  # type: ignore[assignment]
    sys.exit(main(argv))
