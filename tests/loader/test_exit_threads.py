"""Every exit path ends with thread workers (worker_method="thread", over a map-style dataset
and an IterableDataset): the exits of test_exit.py, and a SIGTERM, for a script whose workers
are threads of its own process; each case is a real process (a child forked after
``import torch``, see tests/helpers/exits.py) with a wall-time bound, and no thread is left
behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.exits import THREAD_STATUS, check_threads, exit_forker, run_script
from tests.helpers.forker import Forker


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    with exit_forker() as server:
        yield server


THREAD_CASES = [
    (dataset, persistent, how)
    for dataset in ("map", "iterable")
    for persistent in (False, True)
    for how in THREAD_STATUS
    if how not in ("sigint", "sigterm") and (dataset == "map" or how != "live")
]


@pytest.mark.parametrize(("dataset", "persistent", "how"), THREAD_CASES)
def test_a_script_with_live_thread_workers_ends(
    dataset: str, persistent: bool, how: str, forker: Forker
) -> None:
    args = ("seekdata", dataset, "2", str(int(persistent)), how)
    status, text, pids = run_script(forker, *args, "thread")
    check_threads(args, status, text, pids)


SIGNAL_CASES = [
    (dataset, persistent, interrupt)
    for dataset in ("map", "iterable")
    for persistent in (False, True)
    for interrupt in ("main", "group", "term")
    if dataset == "map" or interrupt != "group"
]


@pytest.mark.parametrize(("dataset", "persistent", "interrupt"), SIGNAL_CASES)
def test_a_signal_ends_a_script_while_thread_workers_load(
    dataset: str, persistent: bool, interrupt: str, forker: Forker
) -> None:
    """Ctrl-C (to the process, or to its group as a terminal sends it) and SIGTERM: the worker
    threads block them, so the main thread gets them at once, even while it waits for a batch."""
    how = "sigterm" if interrupt == "term" else "sigint"
    args = ("seekdata", dataset, "2", str(int(persistent)), how)
    status, text, pids = run_script(forker, *args, "thread", interrupt=interrupt)
    if how == "sigint":
        assert "KeyboardInterrupt" in text, text
    check_threads(args, status, text, pids)


@pytest.mark.parametrize("dataset", ["map", "iterable"])
@pytest.mark.parametrize("how", ["end", "raise", "exit", "sigterm"])
def test_a_script_with_a_preemption_handler_and_thread_workers_ends(
    dataset: str, how: str, forker: Forker
) -> None:
    """A PreemptionHandler installed first: SIGTERM is a notice the loop reads, then it ends."""
    args = ("seekdata", dataset, "2", "1", how)
    status, text, pids = run_script(
        forker, *args, "handler", "thread", interrupt="term" if how == "sigterm" else None
    )
    if how == "sigterm":
        assert status == 0 and "stopping" in text and text.rstrip().endswith("end"), text
        assert "threads 2" in text, text
        return
    check_threads(args, status, text, pids)
