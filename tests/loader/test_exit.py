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
from tests.helpers.exits import BOUND, SCRIPT, STATUS, alive, check_ended, exit_forker, run_script
from tests.helpers.forker import Forker

CONFIGS = [(0, False), (2, False), (2, True), (4, True)]  # (num_workers, persistent_workers)


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    with exit_forker() as server:
        yield server


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
    check_ended(args, status, text, pids)


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
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids), f"{args}: workers left behind\n{text}"


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
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids), f"{args}: workers left behind\n{text}"


@pytest.mark.parametrize("interrupt", ["main", "group"])
@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_ctrl_c_ends_a_script_while_it_iterates(
    dataset: str, workers: int, persistent: bool, interrupt: str, forker: Forker
) -> None:
    args = ("seekdata", dataset, str(workers), str(int(persistent)), "sigint")
    status, text, pids = run_script(forker, *args, interrupt=interrupt)
    assert "KeyboardInterrupt" in text, text
    check_ended(args, status, text, pids)


@pytest.mark.parametrize("how", ["end", "raise", "exit"])
@pytest.mark.parametrize("dataset", ["map", "iterable"])
def test_a_script_with_a_preemption_handler_ends(dataset: str, how: str, forker: Forker) -> None:
    """A PreemptionHandler installed before the workers start (a SLURM job's script)."""
    args = ("seekdata", dataset, "2", "1", how)
    status, text, pids = run_script(forker, *args, "handler")
    check_ended(args, status, text, pids)


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
    check_ended(args, status, text, pids)


@pytest.mark.parametrize("how", ["live", "raise", "exit"])
def test_torch_gives_the_statuses_expected_here(how: str, forker: Forker) -> None:
    """The reference: torch's own DataLoader ends each case with the status asserted above."""
    args = ("torch", "map", "2", "1", how)
    status, text, pids = run_script(forker, *args)
    check_ended(args, status, text, pids)


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
        check_ended(args, status, text, pids)
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
