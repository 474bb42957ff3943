"""The processes that index files in parallel (``seekdata index -j N``, packing counts): a
``ProcessPoolExecutor`` whose workers end with the process that started them.

A pool's workers wait for their next task on a pipe and never learn that their parent died: a
``seekdata index -j 8`` stopped by SIGTERM sent to its main process only (``kill PID``, a
supervisor that signals one process) or by SIGKILL left its 8 workers waiting forever. On
Linux each worker asks the kernel for SIGTERM when its parent ends (``prctl(PR_SET_PDEATHSIG)``),
and checks, once that is set, that the parent is still the one that started it (it may have
died in between). Elsewhere the pool is Python's, unchanged. A file a worker was writing when
it ended is not lost: indexes are written to a temporary name and renamed, and a rerun finds
those done and indexes only the rest.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

__all__ = ["pool"]

_PR_SET_PDEATHSIG = 1


def pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes that end when this process ends."""
    return ProcessPoolExecutor(max_workers=jobs, initializer=_end_with, initargs=(os.getpid(),))


def _end_with(parent: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl to ask: the pool works, without the guard
        return
    if os.getppid() != parent:  # the parent ended before the request: end now
        os.kill(os.getpid(), signal.SIGTERM)
