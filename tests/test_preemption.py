"""PreemptionHandler: a flag set by a signal, agreed by all ranks at a step boundary."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from seekdata._loader import workers as _workers
from seekdata.checkpoint import CheckpointManager
from seekdata.preemption import PreemptionHandler, WorkerSignals, worker_signals
from tests.helpers.forker import Forker
from tests.scripts._ckpt_launch import forker as start_forker
from tests.scripts._ckpt_launch import gloo_job


@pytest.fixture(autouse=True)
def _default_usr1():
    """Every test starts and ends with SIGUSR1 at its default (terminate), as in a fresh job."""
    before = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_signal_sets_the_flag_and_should_stop_stays_true() -> None:
    with PreemptionHandler() as preemption:
        assert preemption.received is None and not preemption.should_stop()
        signal.raise_signal(signal.SIGUSR1)  # runs the Python handler before returning
        assert preemption.received == signal.SIGUSR1
        assert preemption.should_stop() and preemption.should_stop()
        signal.raise_signal(signal.SIGTERM)  # handled too; the first signal is kept
        assert preemption.received == signal.SIGUSR1


def test_close_restores_the_previous_handlers() -> None:
    calls: list[int] = []

    def mine(signum: int, frame: object) -> None:
        calls.append(signum)

    signal.signal(signal.SIGUSR1, mine)
    before_term = signal.getsignal(signal.SIGTERM)
    preemption = PreemptionHandler()
    signal.raise_signal(signal.SIGUSR1)
    assert calls == [] and preemption.received == signal.SIGUSR1  # the handler only flags
    preemption.close()
    preemption.close()  # idempotent
    assert signal.getsignal(signal.SIGUSR1) is mine
    assert signal.getsignal(signal.SIGTERM) == before_term
    signal.raise_signal(signal.SIGUSR1)
    assert calls == [signal.SIGUSR1]


def test_a_handler_installed_later_is_left_in_place() -> None:
    def later(signum: int, frame: object) -> None:
        pass

    with PreemptionHandler(signals=(signal.SIGUSR1,)):
        signal.signal(signal.SIGUSR1, later)
    assert signal.getsignal(signal.SIGUSR1) is later


def test_only_the_listed_signals_are_handled() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionHandler(signals=[signal.SIGUSR1]) as preemption:
        assert signal.getsignal(signal.SIGTERM) == before
        assert preemption.signals == (signal.SIGUSR1,)
        assert "SIGUSR1" in repr(preemption)


@pytest.mark.parametrize(
    ("signals", "error", "match"),
    [
        (signal.SIGUSR1, TypeError, "signals must be a tuple of signals; got Signals"),
        ((), ValueError, "at least one signal"),
        ((signal.SIGKILL,), ValueError, "must be catchable; got SIGKILL"),
        (("SIGUSR1",), TypeError, "each signal must be a signal.Signals; got str"),
        ((10_000,), ValueError, "valid signal number; got 10000"),
    ],
)
def test_bad_signals(signals: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PreemptionHandler(signals=signals)  # type: ignore[arg-type]
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # nothing left installed


def test_must_be_created_in_the_main_thread() -> None:
    errors: list[BaseException] = []

    def create() -> None:
        try:
            PreemptionHandler()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=create, name="worker")
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "main thread" in str(errors[0]) and "'worker'" in str(errors[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_children_ignore_the_notice_but_still_stop_on_sigterm() -> None:
    with PreemptionHandler():
        statuses = []
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            with warnings.catch_warnings():  # Python 3.12+ warns about fork with threads
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: like a DataLoader worker forked after installation
                try:
                    signal.raise_signal(sig)
                finally:
                    os._exit(0)
            statuses.append(os.waitpid(pid, 0)[1])
    usr1, term = statuses
    assert os.WIFEXITED(usr1) and os.WEXITSTATUS(usr1) == 0  # ignored: the worker lives on
    assert os.WIFSIGNALED(term) and os.WTERMSIG(term) == signal.SIGTERM


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """torch and seekdata imported once; each rank of a job is a process forked from it."""
    modules = ("torch", "torch.distributed", "seekdata", "seekdata.checkpoint", "seekdata.training")
    with start_forker(*modules) as server:
        yield server


def test_signal_to_one_rank_stops_both_at_the_same_step(tmp_path: Path, forker: Forker) -> None:
    with gloo_job("_train_preempt_worker.py", tmp_path, forker=forker) as job:
        job.wait_for("ready0", "ready1")  # both ranks have installed the handler
        job.signal(1, signal.SIGUSR1)
        rank0, rank1 = job.results()
    assert rank0["received"] is None and rank1["received"] == "SIGUSR1"
    assert rank0["stopped_at"] == rank1["stopped_at"] >= 1
    assert rank0["checkpoint_step"] == rank1["checkpoint_step"] == rank0["stopped_at"]
    assert rank0["checkpoint_by"] == rank1["checkpoint_by"] == 0
    assert rank0["restored"] and rank1["restored"]


@pytest.mark.parametrize(
    ("sigs", "workers", "persistent"),
    [
        ((signal.SIGTERM,), 0, "fresh"),
        ((signal.SIGTERM,), 2, "persistent"),
        ((signal.SIGTERM,), 2, "fresh"),
        ((signal.SIGUSR1,), 2, "persistent"),
        ((signal.SIGUSR1, signal.SIGTERM), 2, "persistent"),  # --signal, then the time limit
    ],
)
def test_a_signal_to_every_process_of_the_step_checkpoints_and_resumes_exactly(
    tmp_path: Path, sigs: tuple[signal.Signals, ...], workers: int, persistent: str, forker: Forker
) -> None:
    """What SLURM does at a time limit: the signal reaches both ranks and all their workers."""
    args = (str(workers), persistent)
    preempt = ("preempt", *args)
    with gloo_job("_train_preempt_loader_worker.py", tmp_path, *preempt, forker=forker) as job:
        job.wait_for("ready0", "ready1")  # both ranks are training, their workers started
        for sig in sigs:
            job.signal_step(sig)
        rank0, rank1 = job.results()
    stopped = rank0["stopped_at"]
    assert rank1["stopped_at"] == stopped >= 3
    assert {rank0["received"], rank1["received"]} <= {s.name for s in sigs} | {None}
    assert {rank0["received"], rank1["received"]} != {None}
    assert CheckpointManager(tmp_path / "ckpt").steps() == [stopped]
    until = str(stopped + 9)  # past an epoch end (6 steps per epoch)
    resume = ("resume", *args, until)
    with gloo_job("_train_preempt_loader_worker.py", tmp_path, *resume, forker=forker) as job:
        rank0, _ = job.results()
    assert rank0 == {"resumed_to": stopped + 9, "fresh_to": stopped + 9}
    weights = torch.load(tmp_path / "w.pt", weights_only=True)
    resumed, fresh = weights["resumed"], weights["fresh"]
    assert resumed.keys() == fresh.keys()
    assert all(torch.equal(resumed[k], fresh[k]) for k in fresh)


class _Pids(torch.utils.data.Dataset):
    """Sample i is (i, the pid of the process that loaded it)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[int, int]:
        return i, os.getpid()


class _IterablePids(torch.utils.data.IterableDataset):
    """The same samples from an IterableDataset, split between the workers."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return ((i, os.getpid()) for i in range(start, 64, step))


@pytest.mark.parametrize(
    ("sig", "options", "handler_first"),
    [
        (signal.SIGTERM, {"persistent_workers": True}, True),
        (signal.SIGTERM, {"persistent_workers": True}, False),  # workers forked before it
        (signal.SIGTERM, {}, True),  # new workers each epoch, after the signal too
        (signal.SIGUSR1, {}, True),
        (signal.SIGTERM, {"iterable": True}, True),
        (signal.SIGTERM, {"torch_spawn": True}, True),  # torch's own loader; nothing inherited
    ],
)
def test_loader_workers_outlive_the_notice_and_the_epoch_completes(
    sig: signal.Signals, options: dict, handler_first: bool
) -> None:
    """Workers of every kind keep serving batches after SIGTERM/SIGUSR1 reached them."""
    from seekdata import StatefulDataLoader

    options = dict(options)
    dataset = _IterablePids() if options.pop("iterable", False) else _Pids()
    before = signal.getsignal(signal.SIGTERM)
    loader: Any
    if options.pop("torch_spawn", False):  # the recipe docs/slurm.md gives for torch's loader
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=4,
            num_workers=2,
            multiprocessing_context="spawn",
            worker_init_fn=WorkerSignals(),
        )
    else:
        loader = StatefulDataLoader(dataset, batch_size=4, num_workers=2, **options)
    seen: list[int] = []
    try:
        if not handler_first:  # persistent workers started before the handler existed
            seen += next(iter(loader))[0].tolist()
        with PreemptionHandler() as preemption:
            for step, (index, pid) in enumerate(loader):
                seen += index.tolist()
                if step == 1:
                    workers = set(pid.tolist()) - {os.getpid()}
                    assert workers  # a worker loaded this batch
                    # what SLURM sends every process of the step, from outside the job
                    send_from_outside(sig, *workers)
                    os.kill(os.getpid(), sig)
            assert preemption.received == sig and preemption.should_stop()
            assert sorted(seen) == list(range(64))  # no worker died, no batch was lost
            assert sorted(i for index, _ in loader for i in index.tolist()) == list(range(64))
    finally:
        del loader
        signal.signal(signal.SIGTERM, before)


def send_from_outside(sig: signal.Signals, *pids: int) -> None:
    """Send ``sig`` from another process (SLURM's slurmstepd, a shell's kill), not the parent."""
    code = "import os, sys; [os.kill(int(p), int(sys.argv[1])) for p in sys.argv[2:]]"
    subprocess.run([sys.executable, "-c", code, str(int(sig)), *map(str, pids)], check=True)


def _forked_worker(exiting: Any, inherit: bool = True) -> tuple[int, int]:
    """Fork a child that runs worker_signals(exiting) and reports on a pipe each notice it
    ignored; returns (pid, read end). ``inherit=False``: the child did not inherit this
    process's exit flag (as a spawned worker)."""
    _workers.exit_flag()  # what the child inherits unless told not to
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns about fork with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            if not inherit:
                _workers._flag_pid = None
            worker_signals(exiting)
            signal.raise_signal(signal.SIGUSR1)  # ignored
            os.write(write, b"r")
            reported = 0
            while True:
                if _workers._worker_sigterms > reported:
                    reported += 1
                    os.write(write, b"1")
                time.sleep(0.001)
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"r"
    return pid, read


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_notice_is_ignored_once_and_a_second_ends_the_worker() -> None:
    pid, read = _forked_worker(None)  # the inherited flag: not set
    try:
        send_from_outside(signal.SIGTERM, pid)
        assert os.read(read, 1) == b"1"  # received, ignored: the worker lives on
        send_from_outside(signal.SIGTERM, pid)
        status = os.waitpid(pid, 0)[1]
    finally:
        os.close(read)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("flag", ["passed", "inherited", "none"])
def test_sigterm_ends_the_worker_quietly_once_its_owner_exits(flag: str) -> None:
    """How multiprocessing ends daemonic workers at exit (one SIGTERM, then join): status 0,
    as torch's own workers give when their parent stops them (a signalled worker makes the
    parent's SIGCHLD handler raise). Without a flag a worker cannot tell: SIGTERM ends it."""
    passed = multiprocessing.RawValue("b", 0) if flag == "passed" else None
    pid, read = _forked_worker(passed, inherit=flag == "inherited")
    exiting = _workers.exit_flag() if flag == "inherited" else passed
    try:
        if exiting is not None:
            exiting.value = 1  # what the owner's atexit hook does (preemption.exit_flag)
        os.kill(pid, signal.SIGTERM)
        status = os.waitpid(pid, 0)[1]
    finally:
        os.close(read)
        if exiting is not None:
            exiting.value = 0  # this process goes on: its workers must not think it exits
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
