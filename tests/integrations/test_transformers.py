"""HF Trainer through seekdata.integrations.transformers: train(resume_from_checkpoint=...) in a
fresh process is bit-identical to the uninterrupted run, mid-epoch and at an epoch's end, with
the loader the Trainer builds or the user's own from an overridden get_train_dataloader(); and
under DDP with two gloo ranks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.forker import Forker
from tests.scripts._ckpt_launch import gloo_job
from tests.scripts._fresh import forker as start_forker
from tests.scripts._fresh import run_fresh

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

W = "_transformers_worker.py"


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """transformers imported once; each Trainer run is a process forked from it (_fresh.py)."""
    with start_forker("torch", "transformers", "seekdata.integrations.transformers") as server:
        yield server


@pytest.fixture(scope="module")
def uninterrupted(
    tmp_path_factory: pytest.TempPathFactory, forker: Forker
) -> Callable[[int], tuple[dict, Path]]:
    """The uninterrupted run for a gradient accumulation, made once, on first use."""
    runs: dict[int, tuple[dict, Path]] = {}

    def get(ga: int) -> tuple[dict, Path]:
        if ga not in runs:
            tmp = tmp_path_factory.mktemp(f"trainer_ga{ga}")
            full = run_fresh(W, tmp / "full.json", tmp / "run", 0, "none", ga, forker=forker)
            runs[ga] = (full, tmp / "run")
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
    forker: Forker,
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
        forker=forker,
    )
    assert resumed["losses"] == full["losses"][batches_in:]  # every batch's loss, exactly
    assert resumed["params"] == full["params"]
    if workers == 0:  # the Trainer's own skip of the batches already trained read no data
        assert resumed["fetched"] == 4 * (12 - batches_in)


@pytest.fixture(scope="module")
def own_loader(tmp_path_factory: pytest.TempPathFactory, forker: Forker) -> tuple[dict, Path]:
    """The uninterrupted run of a Trainer subclass whose get_train_dataloader() returns the
    user's own seekdata loader."""
    tmp = tmp_path_factory.mktemp("trainer_own")
    full = run_fresh(W, tmp / "full.json", tmp / "run", 0, "none", 1, "own", forker=forker)
    return full, tmp / "run"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("checkpoint", "workers", "ignore_data_skip"),
    [
        (3, 0, False),  # mid-epoch
        (3, 2, False),
        (6, 2, False),  # an epoch's end
        (6, 0, True),  # at an epoch's end there is nothing to skip: ignoring the skip is exact
    ],
)
def test_own_loader_from_get_train_dataloader_resumes_bit_identical(
    own_loader: tuple[dict, Path],
    tmp_path: Path,
    checkpoint: int,
    workers: int,
    ignore_data_skip: bool,
    forker: Forker,
) -> None:
    """get_train_dataloader() overridden to return the user's seekdata loader (own sampler,
    collate_fn, dataset wrapper): resumed in a fresh process, every later batch holds the same
    samples with the same augmentation, and every loss and the final parameters are equal."""
    full, run = own_loader
    assert len(full["seen"]) == 12  # 2 epochs of 6 batches, each epoch a permutation
    for epoch in (0, 1):
        assert sorted(i for b in full["seen"][6 * epoch : 6 * epoch + 6] for i in b) == (
            list(range(24))
        )
    flags = [1, "own"] + (["ignore_data_skip"] if ignore_data_skip else [])  # ga 1
    checkpoint_dir = f"{run}/checkpoint-{checkpoint}"
    resumed = run_fresh(
        W, tmp_path / "res.json", tmp_path / "out", workers, checkpoint_dir, *flags, forker=forker
    )
    for key in ("seen", "digests", "losses"):
        assert resumed[key] == full[key][checkpoint:], key
    assert resumed["params"] == full["params"]
    if workers == 0:  # the Trainer's skip of the batches already trained read no data
        assert resumed["fetched"] == 4 * (12 - checkpoint)


@pytest.mark.slow
def test_own_loader_with_ignore_data_skip_restarts_the_epoch_exactly(
    own_loader: tuple[dict, Path], tmp_path: Path, forker: Forker
) -> None:
    """ignore_data_skip=True from the mid-epoch checkpoint 3 (global step 3 of 12): the Trainer
    trains the resumed epoch from its first batch and stops at max_steps, so it sees the
    uninterrupted run's epoch 0 in full, then epoch 1's first 3 batches: the same samples with
    the same augmentation. Its model differs from the uninterrupted run's, so its losses are
    compared between two fresh resumes, at 0 and 2 workers: bit-identical."""
    full, run = own_loader
    flags = (1, "own", "ignore_data_skip")  # ga 1
    runs = [
        run_fresh(
            W,
            tmp_path / f"w{w}.json",
            tmp_path / f"out{w}",
            w,
            f"{run}/checkpoint-3",
            *flags,
            forker=forker,
        )
        for w in (0, 2)
    ]
    for resumed in runs:
        assert resumed["seen"] == full["seen"][:9]
        assert resumed["digests"] == full["digests"][:9]
        assert len(resumed["losses"]) == 9
    assert runs[0]["losses"] == runs[1]["losses"]
    assert runs[0]["params"] == runs[1]["params"]
    assert runs[0]["fetched"] == 4 * 9


def test_an_override_must_return_a_seekdata_loader(tmp_path: Path) -> None:
    """What an overridden get_train_dataloader() returns is adapted once (also through a
    subclass that returns super()'s); a torch DataLoader is refused, naming the fix."""
    import torch
    from transformers import TrainingArguments

    import seekdata
    from seekdata.integrations.transformers import Trainer, _TrainerLoader

    class Own(Trainer):
        loader: object = None

        def get_train_dataloader(self) -> object:
            return self.loader

    class Through(Own):
        def get_train_dataloader(self) -> object:
            return super().get_train_dataloader()

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    for cls in (Own, Through):
        trainer = cls(model=torch.nn.Linear(1, 1), args=args)
        trainer.loader = seekdata.StatefulDataLoader(range(8), batch_size=2, shuffle=True, seed=0)
        adapted = trainer.get_train_dataloader()
        assert type(adapted) is _TrainerLoader and adapted.loader is trainer.loader
        assert trainer._seekdata_loader is trainer.loader  # its cursor goes into checkpoints
        trainer.loader = torch.utils.data.DataLoader(range(8), batch_size=2)
        with pytest.raises(TypeError, match=r"return a seekdata\.StatefulDataLoader.*got torch"):
            trainer.get_train_dataloader()


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
@pytest.mark.parametrize("loader", ["built", "own"])
def test_ddp_two_ranks_resume_from_checkpoint_exactly(
    tmp_path: Path, loader: str, forker: Forker
) -> None:
    """The Trainer under DDP (2 gloo ranks), with the loader it builds or the user's own
    (get_train_dataloader() overridden, unprepared, sharded by its seekdata.DistributedSampler):
    resumed from a mid-epoch checkpoint in fresh processes, every rank repeats every later
    batch, loss and the final parameters; each epoch is split between the ranks, none lost or
    repeated."""
    results = {}
    for phase, checkpoint in (("full", "none"), ("resume", "full/run/checkpoint-2")):
        (tmp_path / phase).mkdir()
        ckpt = str(tmp_path / checkpoint) if checkpoint != "none" else "none"
        args = (phase, ckpt, loader)
        with gloo_job("_transformers_ddp_worker.py", tmp_path, *args, forker=forker) as job:
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
