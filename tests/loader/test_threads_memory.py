"""Thread workers collate into ordinary memory: torch's ``default_collate`` stacks a batch into a
new shared-memory segment whenever ``get_worker_info()`` is not None (for the trip from a worker
process), a trip threads never make. The values are the same; a collate of the user's own still
sees the thread's ``get_worker_info()``."""

from __future__ import annotations

from typing import Any

import torch

import seekdata


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": torch.full((3, 4), i), "y": torch.tensor(i * i)}


def batches(method: str, collate_fn: Any = None) -> list[Any]:
    loader = seekdata.StatefulDataLoader(
        Squares(), batch_size=8, shuffle=True, seed=3, num_workers=2, worker_method=method,
        collate_fn=collate_fn,
    )  # fmt: skip
    return list(loader)


def test_thread_batches_are_not_in_shared_memory_and_equal_process_batches() -> None:
    threads, processes = batches("thread"), batches("multiprocessing")
    assert len(threads) == len(processes) == 5
    for a, b in zip(threads, processes, strict=True):
        assert torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"])
        assert not a["x"].is_shared() and not a["y"].is_shared()
        assert b["x"].is_shared()  # process workers' batches arrive in shared memory


def test_a_collate_of_ones_own_still_sees_the_threads_worker_info() -> None:
    seen: list[Any] = []

    def collate(samples: list[Any]) -> Any:
        info = torch.utils.data.get_worker_info()
        seen.append(None if info is None else (info.id, info.num_workers))
        return torch.utils.data.default_collate(samples)

    out = batches("thread", collate)
    assert len(out) == 5 and seen and all(s is not None and s[1] == 2 for s in seen)
    assert {s[0] for s in seen if s is not None} <= {0, 1}
