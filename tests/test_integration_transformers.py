"""HF Trainer through seekdata.integrations.transformers: train(resume_from_checkpoint=...) in a
fresh process is bit-identical to the uninterrupted run, mid-epoch and at an epoch's end; and
under DDP with two gloo ranks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests._ckpt_launch import gloo_job
from tests._fresh import run_fresh

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

W = "_transformers_worker.py"


@pytest.fixture(scope="module")
def uninterrupted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[int], tuple[dict, Path]]:
    """The uninterrupted run for a gradient accumulation, made once, on first use."""
    runs: dict[int, tuple[dict, Path]] = {}

    def get(ga: int) -> tuple[dict, Path]:
        if ga not in runs:
            tmp = tmp_path_factory.mktemp(f"trainer_ga{ga}")
            runs[ga] = (run_fresh(W, tmp / "full.json", tmp / "run", 0, "none", ga), tmp / "run")
        return runs[ga]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ga", "checkpoint", "batches_in", "workers"),
    [
        (1, 3, 3, 0),  # mid-epoch
        (1, 6, 6, 2),  # an epoch's end
        (4, 1, 4, 0),  # gradient accumulation, 6 batches an epoch: mid-epoch, a short last step
    ],
)
def test_resume_from_checkpoint_is_bit_identical(
    uninterrupted: Callable[[int], tuple[dict, Path]],
    tmp_path: Path,
    ga: int,
    checkpoint: int,
    batches_in: int,
    workers: int,
) -> None:
    full, run = uninterrupted(ga)
    assert len(full["losses"]) == 12  # 2 epochs of 6 batches
    resumed = run_fresh(
        W,
        tmp_path / "resumed.json",
        tmp_path / "out",
        workers,
        f"{run}/checkpoint-{checkpoint}",
        ga,
    )
    assert resumed["losses"] == full["losses"][batches_in:]  # every batch's loss, exactly
    assert resumed["params"] == full["params"]
    if workers == 0:  # the Trainer's own skip of the batches already trained read no data
        assert resumed["fetched"] == 4 * (12 - batches_in)


def test_the_trainers_skip_reads_no_data_and_checks_the_cursor() -> None:
    """The Trainer resumes mid-epoch through accelerate's skip_first_batches: on the adapter it
    skips placeholder numbers, then hands out the loader's batches from its restored cursor."""
    import accelerate
    import torch

    import seekdata
    from seekdata.integrations.transformers import _TrainerLoader

    class Counting(torch.utils.data.Dataset):
        fetched = 0

        def __len__(self) -> int:
            return 20

        def __getitem__(self, i: int) -> torch.Tensor:
            Counting.fetched += 1
            return torch.tensor(i)

    def loader() -> seekdata.StatefulDataLoader:
        return seekdata.StatefulDataLoader(Counting(), batch_size=4, shuffle=True, seed=1)

    epoch = [b.tolist() for b in loader()]
    restored = loader()
    it = iter(restored)
    next(it), next(it)
    del it
    Counting.fetched = 0
    skipped = accelerate.skip_first_batches(_TrainerLoader(restored), 2)
    assert [b.tolist() for b in skipped] == epoch[2:]
    assert Counting.fetched == 3 * 4  # the three batches left, nothing skipped was read
    with pytest.raises(seekdata.StateMismatchError, match="resumes at batch 3 of the epoch"):
        list(accelerate.skip_first_batches(_TrainerLoader(loader()), 3))


@pytest.mark.slow
def test_ddp_two_ranks_resume_from_checkpoint_exactly(tmp_path: Path) -> None:
    """The Trainer under DDP (2 gloo ranks): resumed from a mid-epoch checkpoint in fresh
    processes, every rank repeats every later batch, loss and the final parameters; each epoch
    is split between the ranks, none lost or repeated."""
    results = {}
    for phase, checkpoint in (("full", "none"), ("resume", "full/run/checkpoint-2")):
        (tmp_path / phase).mkdir()
        ckpt = str(tmp_path / checkpoint) if checkpoint != "none" else "none"
        with gloo_job("_transformers_ddp_worker.py", tmp_path, phase, ckpt) as job:
            for p in job.procs:
                p.wait(timeout=180)
            assert all(p.returncode == 0 for p in job.procs), job.logs()
        results[phase] = [
            json.loads((tmp_path / phase / f"result{r}.json").read_text()) for r in range(2)
        ]
    full, resumed = results["full"], results["resume"]
    for rank in range(2):
        assert resumed[rank]["seen"] == full[rank]["seen"][2:]
        assert resumed[rank]["losses"] == full[rank]["losses"][2:]
        assert resumed[rank]["params"] == full[rank]["params"]
    for first in (0, 3):  # 3 steps an epoch
        epoch = [i for r in range(2) for batch in full[r]["seen"][first : first + 3] for i in batch]
        assert sorted(epoch) == list(range(24))
