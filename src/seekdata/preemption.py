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

The worker side (:func:`worker_signals`, :class:`WorkerSignals`, the exit flag) lives in
:mod:`seekdata._loader.workers`, since every loader engine uses it; this module keeps the
handler and re-exports the rest.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

import torch

from seekdata._core import dist as _dist
from seekdata._core.checks import ArgumentError, is_int
from seekdata._loader.workers import (
    WorkerSignals,
    exit_flag,
    starting_workers,
    stopping_workers,
    worker_signals,
)

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
            raise ArgumentError(
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
