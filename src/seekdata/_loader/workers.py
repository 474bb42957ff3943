"""Worker signals: how the workers of every seekdata loader outlive a preemption notice yet end
when their owner exits. The engines start and stop their workers inside
:func:`starting_workers` / :func:`stopping_workers` and run :func:`worker_signals` first thing
in each worker; :func:`exit_flag` is the byte of shared memory that tells a worker its owner is
exiting. :class:`WorkerSignals` is the same for a torch ``DataLoader`` of your own (public as
``seekdata.preemption.WorkerSignals``); :class:`seekdata.PreemptionHandler` creates the flag too.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["WorkerSignals", "exit_flag", "starting_workers", "stopping_workers", "worker_signals"]

# The notices a job step sends every process.
_NOTICES = {signal.SIGTERM} | ({signal.SIGUSR1} if hasattr(signal, "SIGUSR1") else set())
# Held while a loader starts its workers: the notices, and Ctrl-C, which CPython drops when it
# lands in an at-fork hook ("Exception ignored in: _releaseLock"), so the script runs on.
_HELD = _NOTICES | {signal.SIGINT}
_worker_sigterms = 0  # notices (SIGTERMs) this worker has received and ignored
_worker_exiting: Any = None  # in a worker: its owner's exit flag (see worker_signals)
_flag: Any = None  # in an owner: the flag its workers read, 1 once this process exits
_flag_pid: int | None = None  # the process that created _flag (a forked child makes its own)


def exit_flag() -> Any:
    """This process's exit flag: a byte of shared memory that its DataLoader workers read, set
    to 1 when the process exits (an ``atexit`` hook that runs before ``multiprocessing`` ends
    its daemonic children). Created on first use; it pickles into spawned workers."""
    global _flag, _flag_pid
    if _flag_pid != os.getpid():
        _flag = multiprocessing.RawValue("b", 0)
        _flag_pid = os.getpid()
        # registered after multiprocessing's own exit hook (imported with torch), so it runs
        # first: atexit runs its hooks last in, first out
        atexit.register(_exiting, _flag, _flag_pid)
    return _flag


def _exiting(flag: Any, pid: int) -> None:
    # A Python signal handler can raise at any line, this hook included: torch's SIGCHLD
    # handler reports a dead worker by raising whenever the signal lands. Were the flag left
    # at 0, multiprocessing's exit would send the live workers the one SIGTERM that they take
    # for a notice, then join them forever; so the flag is set until it is set.
    for _ in range(1000):
        try:
            if os.getpid() == pid:  # not in a child that inherited the hook through os.fork
                flag.value = 1
            return
        except BaseException:  # raised by a handler: set it again
            continue


@contextmanager
def starting_workers() -> Iterator[None]:
    """Hold the preemption notices and Ctrl-C in this thread while a loader starts its workers
    (and create this process's :func:`exit_flag`, which they read).

    A worker forked in between inherits the blocked signals, so a notice that reaches it
    before :func:`worker_signals` runs waits until its handler is installed instead of ending
    it. (A ``spawn`` or ``forkserver`` worker starts with them unblocked: ``multiprocessing``
    unblocks ``SIGTERM`` and ``SIGINT`` to start its resource tracker.) This thread receives
    what arrived meanwhile as soon as the block ends: a Ctrl-C during a fork raises
    ``KeyboardInterrupt`` here instead of vanishing in CPython's at-fork hooks."""
    exit_flag()
    with _held():
        yield


@contextmanager
def stopping_workers() -> Iterator[None]:
    """Hold the preemption notices and Ctrl-C in this thread while a loader shuts its workers
    down: torch's shutdown is not written to be interrupted (a ``KeyboardInterrupt`` halfway
    leaves its queues' feeder threads to be joined at exit, seconds later), so what arrived
    meanwhile is raised here, once the workers are stopped."""
    with _held():
        yield


@contextmanager
def _held() -> Iterator[None]:
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_handle(signum: int, frame: FrameType | None) -> None:
    """A worker's SIGTERM handler (SIGUSR1 is ignored): see :func:`worker_signals`."""
    global _worker_sigterms
    flag = _worker_exiting
    if flag is None or flag.value:  # its owner is exiting, or no owner can say so
        os._exit(0)  # quietly, as torch's workers end when their parent stops them
    _worker_sigterms += 1
    if _worker_sigterms >= 2:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def worker_signals(exiting: Any = None) -> None:
    """Make this DataLoader worker outlive a preemption notice, yet end when its owner exits;
    seekdata's loaders call it first thing in every worker (their ``worker_init_fn``).

    SLURM signals every process of a job step, workers included: ``SIGUSR1`` from ``--signal``
    (whose default action ends a process) and ``SIGTERM`` at the time limit. A worker that dies
    makes its rank raise "DataLoader worker ... killed by signal" before the loop reaches
    :meth:`PreemptionHandler.should_stop`, so no checkpoint is written. The trainer (the main
    process, the worker's owner) decides:

    - ``SIGUSR1`` is ignored;
    - ``SIGTERM`` ends the worker at once, with status 0 as torch's own workers do, once the
      owner is exiting: ``multiprocessing`` ends every daemonic worker with one ``SIGTERM``
      when the main process exits, however it exits (the end of the script, an exception,
      ``sys.exit``, Ctrl-C), and the owner's :func:`exit_flag` says so first;
    - any other ``SIGTERM`` is a notice: the first is ignored, a second ends the worker.
      SLURM sends one, then ``SIGKILL`` after ``KillWait``.

    ``exiting`` is the owner's :func:`exit_flag`; by default the one this worker inherited
    through ``fork`` from its owner (which :class:`PreemptionHandler` and seekdata's loaders
    create). A worker with no flag at all (spawned, with none passed) cannot tell an exit from
    a notice and keeps ``SIGTERM``'s meaning: it ends. :class:`WorkerSignals` passes the flag
    with every start method.
    """
    global _worker_exiting
    if exiting is None and _flag_pid is not None and _flag_pid == os.getppid():
        exiting = _flag  # inherited through fork from the owner
    _worker_exiting = exiting
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a pending one is discarded
    signal.signal(signal.SIGTERM, _worker_handle)
    if hasattr(signal, "pthread_sigmask"):  # what was held since the fork arrives now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)


class WorkerSignals:
    """A ``worker_init_fn`` for a torch ``DataLoader`` of your own: its workers outlive a
    preemption notice and end when this process exits (:func:`worker_signals`), with any start
    method; then ``worker_init_fn(worker_id)`` runs, if given. Build it in the main process::

        loader = torch.utils.data.DataLoader(
            dataset, num_workers=4, worker_init_fn=seekdata.preemption.WorkerSignals()
        )
    """

    def __init__(self, worker_init_fn: Callable[[int], None] | None = None) -> None:
        self.worker_init_fn = worker_init_fn
        self.exiting = exit_flag()

    def __call__(self, worker_id: int) -> None:
        worker_signals(self.exiting)
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)
