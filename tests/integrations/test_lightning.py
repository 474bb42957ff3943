"""Lightning with seekdata.integrations.lightning.StepRNGCallback: fit(ckpt_path=...) in a fresh
process is bit-identical to the uninterrupted fit, mid-epoch and at an epoch's end, whether the
loader is passed to fit or built by the module's train_dataloader(); and under DDP with
Lightning's default sampler injection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import seekdata
from tests.helpers.forker import Forker
from tests.scripts._fresh import forker as start_forker
from tests.scripts._fresh import run_fresh

pytest.importorskip("lightning")

W = "_lightning_worker.py"
D = "_lightning_ddp_worker.py"


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """Lightning imported once; each fit is a process forked from it (see _fresh.py)."""
    with start_forker("torch", "lightning", "seekdata.integrations.lightning") as server:
        yield server


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, forker: Forker) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("lightning")
    return run_fresh(W, tmp / "full.json", tmp / "ckpt", 0, "none", forker=forker), tmp / "ckpt"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("checkpoint", "step", "workers", "afresh"),
    [("step=3.ckpt", 3, 2, True), ("end-epoch=0.ckpt", 6, 0, False)],  # mid-epoch; epoch's end
)
def test_fit_from_checkpoint_is_bit_identical(
    uninterrupted: tuple[dict, Path],
    tmp_path: Path,
    checkpoint: str,
    step: int,
    workers: int,
    afresh: bool,
    forker: Forker,
) -> None:
    """The resumed fit in a new process; the mid-epoch one in an interpreter started afresh (the
    others are forked from one that imported Lightning): it repeats the forked run exactly."""
    full, ckpt = uninterrupted
    assert len(full["losses"]) == 12  # 2 epochs of 6 steps
    resumed = run_fresh(
        W,
        tmp_path / "resumed.json",
        tmp_path / "ckpt",
        workers,
        str(ckpt / checkpoint),
        forker=None if afresh else forker,
    )
    assert resumed["losses"] == full["losses"][step:]  # every step's loss, exactly
    assert resumed["params"] == full["params"]


@pytest.fixture(scope="module")
def from_the_hook(tmp_path_factory: pytest.TempPathFactory, forker: Forker) -> tuple[dict, Path]:
    """The uninterrupted fit whose loader the module's train_dataloader() builds."""
    tmp = tmp_path_factory.mktemp("lightning_hook")
    full = run_fresh(W, tmp / "full.json", tmp / "ckpt", 0, "none", "hook", forker=forker)
    return full, tmp / "ckpt"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("checkpoint", "step", "workers", "reload"),
    [
        ("step=3.ckpt", 3, 2, "reload"),  # mid-epoch; epoch 1 from a loader built anew
        ("end-epoch=0.ckpt", 6, 0, "once"),  # an epoch's end
    ],
)
def test_a_loader_from_train_dataloader_resumes_bit_identical(
    from_the_hook: tuple[dict, Path],
    tmp_path: Path,
    checkpoint: str,
    step: int,
    workers: int,
    reload: str,
    forker: Forker,
) -> None:
    """The module's train_dataloader() returns the user's seekdata loader (own sampler, own
    collate_fn); Lightning's checkpoint holds its cursor. Resumed in a fresh process, every
    later batch holds the same samples with the same augmentation, every loss and the final
    parameters are equal; also when the loader is built anew each epoch
    (reload_dataloaders_every_n_epochs=1: the new loader starts at the epoch Lightning sets)."""
    full, ckpt = from_the_hook
    assert len(full["seen"]) == 12
    for epoch in (0, 1):  # each epoch is a permutation, and the two differ
        assert sorted(i for batch in full["seen"][6 * epoch : 6 * epoch + 6] for i in batch) == (
            list(range(24))
        )
    assert full["seen"][:6] != full["seen"][6:]
    resumed = run_fresh(
        W,
        tmp_path / "res.json",
        tmp_path / "ckpt",
        workers,
        ckpt / checkpoint,
        "hook",
        reload,
        forker=forker,
    )
    assert resumed["built"] == (2 if reload == "reload" else 1)
    for key in ("seen", "digests", "losses"):
        assert resumed[key] == full[key][step:], key
    assert resumed["params"] == full["params"]


@pytest.mark.slow
def test_ddp_with_the_default_sampler_injection_resumes_bit_identical(
    tmp_path: Path, forker: Forker
) -> None:
    """Trainer(strategy="ddp", devices=2) with use_distributed_sampler left on: Lightning rebuilds
    the loader around a sampler per rank. It stays a seekdata loader, the ranks split each epoch
    (disjoint, complete), and fit(ckpt_path=...) from a mid-epoch checkpoint in fresh processes
    repeats every later batch, loss and the final parameters exactly, on both ranks."""
    ckpt = tmp_path / "ckpt"
    full = [run_fresh(D, tmp_path / "full.json", ckpt, "none", forker=forker)]
    full.append(json.loads((tmp_path / "full.rank1.json").read_text()))
    assert [f["loader"] for f in full] == ["StatefulDataLoader"] * 2
    for epoch in (0, 1):
        steps = [f["seen"][3 * epoch : 3 * epoch + 3] for f in full]
        indices = [int(i) for rank in steps for batch in rank for i in batch]
        assert sorted(indices) == list(range(24))  # the ranks split the epoch
    resumed = [
        run_fresh(D, tmp_path / "res.json", tmp_path / "ckpt2", ckpt / "step=2.ckpt", forker=forker)
    ]
    resumed.append(json.loads((tmp_path / "res.rank1.json").read_text()))
    for r in (0, 1):
        assert resumed[r]["seen"] == full[r]["seen"][2:]
        assert resumed[r]["losses"] == full[r]["losses"][2:]
        assert resumed[r]["params"] == full[r]["params"]


def test_a_rebuild_around_a_foreign_sampler_is_refused_with_the_fix() -> None:
    """Only Lightning's wrapper of our own sampler can be turned back into the seekable stream;
    any other sampler handed to the batch sampler's class is an error naming the way out."""
    loader = seekdata.StatefulDataLoader(list(range(8)), batch_size=2, shuffle=True, seed=0)
    foreign = torch.utils.data.DistributedSampler(range(8), num_replicas=2, rank=0)
    with pytest.raises(TypeError, match="use_distributed_sampler=False"):
        type(loader.batch_sampler)(foreign, batch_size=2, drop_last=False)
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSamplerWrapper

    predict = UnrepeatedDistributedSamplerWrapper(loader.sampler, num_replicas=2, rank=0)
    with pytest.raises(TypeError, match="Lightning's predict"):
        type(loader.batch_sampler)(predict, batch_size=2, drop_last=False)


def test_lightnings_rebuild_becomes_our_sampler_on_that_rank() -> None:
    """What Lightning's DDP injection does, in one process: the rebuilt loader is rank 1's part
    of the same seekable stream, with the original loader's seed."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    data = list(range(10))
    loader = seekdata.StatefulDataLoader(data, batch_size=2, shuffle=True, seed=5)
    wrapper = DistributedSamplerWrapper(loader.sampler, num_replicas=2, rank=1, shuffle=False)
    batches = type(loader.batch_sampler)(wrapper, batch_size=2, drop_last=False)
    rebuilt = seekdata.StatefulDataLoader(data, batch_sampler=batches, seed=loader.seed)
    rank1 = seekdata.DistributedSampler(data, 2, 1, shuffle=True, seed=5)
    expected = seekdata.StatefulDataLoader(data, batch_size=2, sampler=rank1, seed=5)
    assert [b.tolist() for b in rebuilt] == [b.tolist() for b in expected]
    assert type(rebuilt.sampler) is seekdata.DistributedSampler and rebuilt.sampler.rank == 1
    assert rebuilt.state_dict()["seed"] == loader.state_dict()["seed"]
