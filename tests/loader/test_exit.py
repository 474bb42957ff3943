"""Every exit path ends: a real script that finishes, raises, calls sys.exit or gets Ctrl-C
while a loader's workers are alive ends with the status torch's DataLoader gives, and leaves
no worker behind. Each case runs as its own process with a wall-time bound (a hang fails the
test instead of hanging the suite): a child forked from one interpreter that imported torch
once (tests/helpers/forker.py; the child ends through the interpreter's own exit, as a script
does), and a few cases also as a script started afresh, to show the two end alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import seekdata
from tests.helpers.forker import Forker, Run
from tests.helpers.paths import SCRIPTS

SCRIPT = SCRIPTS / "_exit_script.py"
BOUND = 60.0  # seconds: a script that ends takes ~2; one that hangs never ends

# HOW -> the status Python (and torch's DataLoader) gives it
STATUS = {"end": 0, "live": 0, "break": 0, "raise": 1, "exit": 3, "sigint": -signal.SIGINT}
# worker_method="thread" (map-style datasets only): the same statuses, and a SIGTERM
THREAD_STATUS = {**STATUS, "sigterm": -signal.SIGTERM}

CONFIGS = [(0, False), (2, False), (2, True), (4, True)]  # (num_workers, persistent_workers)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:\tZ") for line in f)
    except FileNotFoundError:
        return False


def _env() -> dict[str, str]:
    """The environment with the seekdata this test imported (a checkout's src/, or the installed
    one) first on the path."""
    path = [str(Path(seekdata.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """One interpreter with torch and seekdata imported, forking a process per case."""
    with Forker("torch", "seekdata", "seekdata.loader", env=_env()) as server:
        yield server


def run_script(
    forker: Forker | None, *args: str, interrupt: str | None = None
) -> tuple[int, str, set[int]]:
    """Run the script to its end within BOUND, forked from FORKER (None: a fresh interpreter);
    (status, output, pids of every loading process)."""
    if forker is not None:  # its own session, as below
        proc: subprocess.Popen[str] | Run = forker.popen([str(SCRIPT), *args])
    else:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
            start_new_session=True,  # its own process group, as a shell job is
        )
    lines: list[str] = []
    try:
        if interrupt is not None:
            assert proc.stdout is not None
            for line in proc.stdout:  # wait until it iterates: the signal is not timed
                lines.append(line)
                if line.startswith("iterating"):
                    break
            if interrupt == "term":  # a preemption notice (SLURM's SIGTERM)
                os.kill(proc.pid, signal.SIGTERM)
            elif interrupt == "group":  # Ctrl-C in a terminal: the whole foreground group
                os.killpg(proc.pid, signal.SIGINT)
            else:  # kill -INT of the main process alone
                os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"{args}: still running after {BOUND:.0f} s\n{''.join(lines)}{out}"
        ) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(lines) + out
    pids = {
        int(p) for line in text.splitlines() if line.startswith("pids") for p in line.split()[1:]
    }
    return proc.returncode, text, pids - {proc.pid}


def _check_ended(args: tuple[str, ...], status: int, text: str, workers: set[int]) -> None:
    how = args[4]
    assert status == THREAD_STATUS[how], (
        f"{args}: status {status}, expected {THREAD_STATUS[how]}\n{text}"
    )
    if how in ("end", "live", "break"):
        assert text.rstrip().endswith("end"), text
    assert "killed by signal" not in text and "Exception ignored" not in text, text
    deadline = time.monotonic() + BOUND  # a worker orphaned by its parent's end goes on its own
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers), f"{args}: workers left behind\n{text}"


CASES = [
    (dataset, workers, persistent, how)
    for dataset in ("map", "iterable")
    for workers, persistent in CONFIGS
    for how in STATUS
    if how != "sigint"
    if (workers, persistent) != (4, True) or how in ("live", "raise")
]


@pytest.mark.parametrize(("dataset", "workers", "persistent", "how"), CASES)
def test_a_script_with_a_live_loader_ends(
    dataset: str, workers: int, persistent: bool, how: str, forker: Forker
) -> None:
    args = ("seekdata", dataset, str(workers), str(int(persistent)), how)
    status, text, pids = run_script(forker, *args)
    if workers:
        assert pids, text  # workers loaded the samples
    _check_ended(args, status, text, pids)


@pytest.mark.parametrize("how", ["killed", "killed-caught"])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_a_script_whose_worker_was_killed_ends(
    dataset: str, persistent: bool, how: str, forker: Forker
) -> None:
    """A worker killed by SIGKILL: the loader raises at once (torch's error), and the script
    ends with that error, or normally when it caught it and kept the iterator. torch's SIGCHLD
    handler reports the dead worker asynchronously, at whatever line runs when the signal
    lands: a script that caught the first report may get a second one later (its end is then
    status 1, with torch's message), and under load the report can arrive while the
    interpreter shuts down (status 1, stderr already gone). What must hold is that it ends."""
    args = ("seekdata", dataset, "2", str(int(persistent)), how)
    status, text, pids = run_script(forker, *args)
    if how == "killed":
        assert status == 1, text
    else:
        assert "caught:" in text, text
        assert status == 0 or (status == 1 and "is killed by signal" in text), text
    deadline = time.monotonic() + BOUND
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), f"{args}: workers left behind\n{text}"


def test_a_ctrl_c_while_superseded_workers_stop_ends_the_script(forker: Forker) -> None:
    """A new iter() stops the workers of the iterator it supersedes. torch stops them in its
    iterator's ``__del__`` when nothing else does, where a KeyboardInterrupt is ignored
    ("Exception ignored in ... __del__") and the script ran on; seekdata stops them in its own
    code, with Ctrl-C held until they are stopped, so the script ends with it. The Ctrl-C is
    sent by the script itself at the start of that shutdown: not timed."""
    args = ("seekdata", "map", "2", "0", "sigint-in-shutdown")
    status, text, pids = run_script(forker, *args)
    assert status == -signal.SIGINT and "KeyboardInterrupt" in text, text
    assert "Exception ignored" not in text, text
    deadline = time.monotonic() + BOUND
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids), f"{args}: workers left behind\n{text}"


@pytest.mark.parametrize("interrupt", ["main", "group"])
@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_ctrl_c_ends_a_script_while_it_iterates(
    dataset: str, workers: int, persistent: bool, interrupt: str, forker: Forker
) -> None:
    args = ("seekdata", dataset, str(workers), str(int(persistent)), "sigint")
    status, text, pids = run_script(forker, *args, interrupt=interrupt)
    assert "KeyboardInterrupt" in text, text
    _check_ended(args, status, text, pids)


@pytest.mark.parametrize("how", ["end", "raise", "exit"])
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_a_script_with_a_preemption_handler_ends(dataset: str, how: str, forker: Forker) -> None:
    """A PreemptionHandler installed before the workers start (a SLURM job's script)."""
    args = ("seekdata", dataset, "2", "1", how)
    status, text, pids = run_script(forker, *args, "handler")
    _check_ended(args, status, text, pids)


@pytest.mark.parametrize(
    ("workers", "persistent", "how"),
    [(2, 1, "live"), (2, 1, "break"), (2, 1, "raise"), (2, 0, "break")],
)
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_a_script_with_batches_pulled_ahead_ends(
    dataset: str, workers: int, persistent: int, how: str, forker: Forker
) -> None:
    """device=: the iterator holds batches pulled ahead of the step when the script ends."""
    args = ("seekdata", dataset, str(workers), str(persistent), how)
    status, text, pids = run_script(forker, *args, "lookahead")
    assert pids, text
    _check_ended(args, status, text, pids)


@pytest.mark.parametrize("how", ["live", "raise", "exit"])
def test_torch_gives_the_statuses_expected_here(how: str, forker: Forker) -> None:
    """The reference: torch's own DataLoader ends each case with the status asserted above."""
    args = ("torch", "map", "2", "1", how)
    status, text, pids = run_script(forker, *args)
    _check_ended(args, status, text, pids)


FRESH = [  # one of each kind of end: normal, exception, Ctrl-C to the group, SIGTERM to threads
    (("seekdata", "iterable", "2", "0", "end"), None),
    (("seekdata", "map", "2", "1", "raise"), None),
    (("seekdata", "map", "2", "1", "sigint"), "group"),
    (("seekdata", "map", "2", "1", "sigterm", "thread"), "term"),
]


@pytest.mark.parametrize(("args", "interrupt"), FRESH)
def test_a_script_started_afresh_ends_as_a_forked_one(
    args: tuple[str, ...], interrupt: str | None, forker: Forker
) -> None:
    """The cases here run in children forked after ``import torch``; these run both ways, and
    end alike: the same status, each as asserted above, no worker left behind."""
    fresh = run_script(None, *args, interrupt=interrupt)
    forked = run_script(forker, *args, interrupt=interrupt)
    for status, text, pids in (fresh, forked):
        _check_ended(args, status, text, pids)
    assert fresh[0] == forked[0], f"{args}: {fresh[1]}\n---\n{forked[1]}"


def test_the_hf_trainer_with_workers_ends_after_a_resumed_training(tmp_path: Path) -> None:
    """The real HF Trainer through seekdata's Trainer, 2 persistent workers, resumed mid-epoch
    from a checkpoint: training ends, and so does the process (it used to hang at exit)."""
    pytest.importorskip("transformers")
    worker = str(SCRIPT.parent / "_transformers_worker.py")
    env = {**os.environ, "PYTHONPATH": str(Path(seekdata.__file__).resolve().parents[1])}
    for checkpoint in ("none", str(tmp_path / "run" / "checkpoint-3")):
        args = [str(tmp_path / "out.json"), str(tmp_path / "run"), "2", checkpoint, "1"]
        try:
            done = subprocess.run(
                [sys.executable, worker, *args, "persistent"],
                capture_output=True,
                text=True,
                env=env,
                timeout=BOUND * 4,  # a Trainer run takes ~15 s here; a hang never ends
            )
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"the Trainer's process did not end: {e.stdout}{e.stderr}") from e
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# --- thread workers (worker_method="thread"): the same exits, in one process -------------------

THREAD_CASES = [
    (persistent, how)
    for persistent in (False, True)
    for how in THREAD_STATUS
    if how not in ("sigint", "sigterm")
]


def _check_threads(args: tuple[str, ...], status: int, text: str, pids: set[int]) -> None:
    assert not pids, f"{args}: thread workers load in this process only\n{text}"
    assert "threads 2" in text, text  # two worker threads were alive while it iterated
    _check_ended(args, status, text, pids)


@pytest.mark.parametrize(("persistent", "how"), THREAD_CASES)
def test_a_script_with_live_thread_workers_ends(persistent: bool, how: str, forker: Forker) -> None:
    args = ("seekdata", "map", "2", str(int(persistent)), how)
    status, text, pids = run_script(forker, *args, "thread")
    _check_threads(args, status, text, pids)


@pytest.mark.parametrize("interrupt", ["main", "group", "term"])
@pytest.mark.parametrize("persistent", [False, True])
def test_a_signal_ends_a_script_while_thread_workers_load(
    persistent: bool, interrupt: str, forker: Forker
) -> None:
    """Ctrl-C (to the process, or to its group as a terminal sends it) and SIGTERM: the worker
    threads block them, so the main thread gets them at once, even while it waits for a batch."""
    how = "sigterm" if interrupt == "term" else "sigint"
    args = ("seekdata", "map", "2", str(int(persistent)), how)
    status, text, pids = run_script(forker, *args, "thread", interrupt=interrupt)
    if how == "sigint":
        assert "KeyboardInterrupt" in text, text
    _check_threads(args, status, text, pids)


@pytest.mark.parametrize("how", ["end", "raise", "exit", "sigterm"])
def test_a_script_with_a_preemption_handler_and_thread_workers_ends(
    how: str, forker: Forker
) -> None:
    """A PreemptionHandler installed first: SIGTERM is a notice the loop reads, then it ends."""
    args = ("seekdata", "map", "2", "1", how)
    status, text, pids = run_script(
        forker, *args, "handler", "thread", interrupt="term" if how == "sigterm" else None
    )
    if how == "sigterm":
        assert status == 0 and "stopping" in text and text.rstrip().endswith("end"), text
        assert "threads 2" in text, text
        return
    _check_threads(args, status, text, pids)
