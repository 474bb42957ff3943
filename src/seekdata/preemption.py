"""Stop every rank at the same step when the cluster says the job must end.

A SLURM time limit or preemption sends a signal (``SIGUSR1`` from ``--signal``, ``SIGTERM``
at the end) to the processes of a job step, not necessarily all at once, DataLoader workers
included: :func:`worker_signals` (run in every seekdata loader worker) keeps the workers alive
through such a notice, while their own process can still end them, so the main process
decides, and exits as it would without seekdata. :class:`PreemptionHandler`'s signal handler
only sets a flag; :meth:`PreemptionHandler.should_stop`, called by every rank at a step
boundary, agrees with an ``all_reduce(MAX)`` of the flags, so all ranks see the same answer at
the same step, checkpoint that step and exit cleanly::

    with seekdata.PreemptionHandler() as preemption:
        for step in range(start, total):
            train_step(step)
            if preemption.should_stop():
                save_checkpoint(step + 1)
                break
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import torch

from seekdata._core import dist as _dist
from seekdata._core.rngkeys import is_int

__all__ = [
    "PreemptionHandler",
    "WorkerSignals",
    "exit_flag",
    "starting_workers",
    "stopping_workers",
    "worker_signals",
]

_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}
# In processes forked from the installing one that are not DataLoader workers these keep their
# previous disposition, so that a parent can still stop its children; other signals are
# ignored there, so a preemption notice sent to every process of a job step does not kill them.
_STOPPING = {signal.SIGTERM, signal.SIGINT}
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


def _check_signals(signals: Any) -> tuple[signal.Signals, ...]:
    where = "PreemptionHandler"
    if isinstance(signals, int | signal.Signals) or not isinstance(signals, Iterable):
        raise TypeError(
            f"{where}: signals must be a tuple of signals; got {type(signals).__name__} "
            f"{signals!r}; pass e.g. signals=(signal.SIGUSR1, signal.SIGTERM)"
        )
    out: list[signal.Signals] = []
    for s in signals:
        if not is_int(s):
            raise TypeError(
                f"{where}: each signal must be a signal.Signals; got {type(s).__name__} {s!r}; "
                f"pass e.g. signal.SIGUSR1"
            )
        try:
            sig = signal.Signals(int(s))
        except ValueError:
            raise ValueError(
                f"{where}: each signal must be a valid signal number; got {s}; pass a member "
                f"of signal.Signals such as signal.SIGUSR1"
            ) from None
        if sig in _UNCATCHABLE:
            raise ValueError(
                f"{where}: signals must be catchable; got {sig.name}, which no process can "
                f"handle; pass SIGUSR1 or SIGTERM (SLURM: --signal=B:USR1@120)"
            )
        if sig not in out:
            out.append(sig)
    if not out:
        raise ValueError(
            f"{where}: signals must name at least one signal; got an empty {signals!r}; "
            f"pass e.g. signals=(signal.SIGUSR1, signal.SIGTERM)"
        )
    return tuple(out)


class PreemptionHandler:
    """Turn preemption signals into a flag that all ranks agree on at a step boundary.

    Installs its handler on construction (main thread only) and restores the previous
    handlers on :meth:`close` or when its ``with`` block exits. The handler only records the
    signal. :meth:`should_stop` must be called by every rank at the same points; with a
    process group it is one ``all_reduce`` (a CPU tensor with gloo; with NCCL a CUDA tensor on
    the current device, so call ``torch.cuda.set_device(local_rank)`` first, as DDP needs
    anyway; pass ``device`` for other backends).
    """

    def __init__(
        self,
        signals: Iterable[int] = (signal.SIGUSR1, signal.SIGTERM),
        *,
        device: str | torch.device | None = None,
    ) -> None:
        self.signals = _check_signals(signals)
        self.device = None if device is None else torch.device(device)
        self._received: signal.Signals | None = None
        self._stop = False
        self._pid = os.getpid()
        exit_flag()  # inherited by the workers forked from now on (worker_signals)
        self._previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "PreemptionHandler must be created in the main thread, where Python runs "
                f"signal handlers; it was created in thread {threading.current_thread().name!r}; "
                "create it before starting threads, in the main thread"
            )
        try:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        except BaseException:
            self.close()
            raise

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if os.getpid() == self._pid:
            if self._received is None:
                self._received = sig
            return
        # A forked child, a torch loader's worker included (seekdata's workers never run this:
        # worker_signals replaced it before any notice could reach them): SIGUSR1 is ignored;
        # SIGTERM and SIGINT do what they did without us, since nothing here tells a parent
        # stopping its child from a notice sent to the whole job step.
        if sig in _STOPPING:
            previous = self._previous.get(sig, signal.SIG_DFL)
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)

    @property
    def received(self) -> signal.Signals | None:
        """The first signal this process received, or None."""
        return self._received

    def should_stop(self) -> bool:
        """True on every rank once any rank received a signal.

        Collective: every rank must call it at the same step. Once true it stays true
        without another collective.
        """
        if self._stop:
            return True
        local = self._received is not None
        self._stop = _dist.any_rank(local, self.device) if _dist.pg_initialized() else local
        return self._stop

    def close(self) -> None:
        """Restore the handlers that were installed before; idempotent.

        A handler someone installed after this one is left in place.
        """
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def __enter__(self) -> PreemptionHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self.signals)
        return f"PreemptionHandler(signals=({names}), received={self.received!r})"
