"""Thread workers in tests: the seekdata worker threads alive now, and a fixture that fails a
test which leaves one running."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest


def thread_workers() -> set[threading.Thread]:
    """The seekdata worker threads (``worker_method="thread"``) alive now."""
    return {t for t in threading.enumerate() if t.name.startswith("seekdata-worker")}


@pytest.fixture(autouse=True)
def no_threads_left() -> Iterator[None]:
    """Imported by a test module: each of its tests ends with no worker thread of its own."""
    before = thread_workers()
    yield
    gc.collect()
    left = thread_workers() - before
    assert not left, f"thread workers left running: {left}"


def run_to(loader: Any, steps: int) -> tuple[list[str], dict[str, Any]]:
    """The digests of ``loader``'s first ``steps`` batches (an ``iter()`` after an epoch's end
    starts the next), and its state after them; its iterator is dropped."""
    from tests.helpers.remote_corpus import digest

    got: list[str] = []
    it = iter(loader)
    while len(got) < steps:
        try:
            got.append(digest(next(it)))
        except StopIteration:
            it = iter(loader)
    state = loader.state_dict()
    del it
    return got, state


def check_no_thread_left(loader: Any, persistent: bool, workers: int) -> None:
    """``loader`` (thread workers) leaves no thread behind: after an epoch (persistent ones:
    kept, the same threads the next epoch), after an iterator dropped mid-epoch, and once the
    loader is dropped. Give it the only reference to the loader."""
    before = thread_workers()
    list(loader)
    if persistent:  # kept for the next epoch, as torch keeps persistent worker processes
        kept = thread_workers() - before
        assert len(kept) == workers
        list(loader)
        assert thread_workers() - before == kept  # the same threads: not started again
    else:
        assert not thread_workers() - before
    it = iter(loader)
    next(it)
    del it  # dropped mid-epoch
    gc.collect()
    if not persistent:
        assert not thread_workers() - before
    del loader
    gc.collect()
    assert not thread_workers() - before
