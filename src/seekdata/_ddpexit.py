"""Ending a DDP rank as an ordinary exit would, without the interpreter's finalization.

torch 2.13's gloo backend can abort a finished rank at interpreter shutdown: a gloo worker
thread (``pt_gloo_runloop``) holds the last reference to the autograd context torch keeps in
thread-local state, and asks for the GIL after the main thread began finalizing; CPython ends
the thread with ``pthread_exit`` inside a ``noexcept`` destructor, and the process dies with
"terminate called without an active exception" (SIGABRT), after the script's last line
(pytorch/pytorch#190489). A launcher then reports a failed rank.

:func:`exit_ddp` does what an ordinary exit does that a script can see — it destroys the
process group, waits for the script's non-daemon threads, runs the ``atexit`` handlers (the
script's own, ``logging``'s, ``multiprocessing``'s that stop DataLoader workers, and seekdata's
exit flag that those workers read), flushes stdout and stderr — and then ends the process with
``os._exit``, skipping the finalization in which the abort happens.

No cheaper step before finalization is reliable: a ``gc.collect()`` or a 0.5 s pause after
``destroy_process_group()`` made the abort rarer on one machine, by giving the gloo thread
time to let go first; that is a race won, not removed. ``benchmarks/ddp_exit.py`` counts the
aborts with and without :func:`exit_ddp`.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from typing import Any, NoReturn

from seekdata._keys import is_int

__all__ = ["exit_ddp"]


def exit_ddp(code: Any = 0) -> NoReturn:
    """End this rank of a DDP job with exit status ``code``, avoiding torch's abort at
    interpreter shutdown ("terminate called without an active exception", SIGABRT).

    Call it as the script's last line, on every rank. It destroys the process group if one
    is initialized, waits for non-daemon threads, runs the ``atexit`` handlers (yours and
    logging's included), flushes stdout and stderr, then calls ``os._exit(code)``: what the
    interpreter would do at exit, less the finalization in which gloo's threads abort it.
    Without a process group it ends the process just the same.
    """
    if not is_int(code):
        raise TypeError(
            f"exit_ddp: code must be an int exit status; got {type(code).__name__} {code!r}; "
            f"pass 0 for success"
        )
    if not 0 <= code <= 255:
        raise ValueError(
            f"exit_ddp: code must be an exit status in [0, 255]; got {code}; pass 0 for "
            f"success, 1 for a failure"
        )
    try:
        # each step runs even when the one before raised (or a Ctrl-C landed), as at exit
        for step in (_destroy_process_group, _join_threads, atexit._run_exitfuncs):
            try:
                step()
            except BaseException:
                traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a closed or broken stream: nothing left to say
                pass
        os._exit(int(code))


def _join_threads() -> None:
    if threading.current_thread() is threading.main_thread():
        # What the interpreter calls first at exit: threading's own exit hooks (those of
        # concurrent.futures' executors), then a join of every non-daemon thread. No public
        # function does both.
        threading._shutdown()  # type: ignore[attr-defined]


def _destroy_process_group() -> None:
    if "torch.distributed" not in sys.modules:  # never imported: no process group
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
