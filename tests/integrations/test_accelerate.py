"""accelerate with a seekdata loader: prepare keeps it, save_state/load_state resume it exactly,
and every rebuild that would drop its randomness fails loudly."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

import seekdata
from tests.scripts._ckpt_launch import gloo_job

accelerate = pytest.importorskip("accelerate")
integration = importlib.import_module("seekdata.integrations.accelerate")  # ours: never skipped


class Noisy(torch.utils.data.Dataset):
    """Counts its fetches; draws its augmentation from global RNG."""

    def __init__(self) -> None:
        self.fetched = 0

    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.fetched += 1
        return torch.tensor(i), torch.rand(2)


def _loader(**kwargs: object) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(Noisy(), batch_size=4, shuffle=True, seed=5, **kwargs)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


@pytest.fixture
def accelerator() -> object:
    return accelerate.Accelerator(cpu=True)


@pytest.mark.parametrize("stateful", [False, True])  # accelerate's use_stateful_dataloader
def test_prepare_hands_the_loader_back_with_its_order_and_randomness(stateful: bool) -> None:
    config = accelerate.DataLoaderConfiguration(use_stateful_dataloader=stateful)
    accelerator = accelerate.Accelerator(cpu=True, dataloader_config=config)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = _loader()
    _, _, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader  # not rebuilt into a sequential DataLoaderShard
    batches = list(prepared)
    assert _same(batches, list(_loader()))
    assert [b[0].tolist() for b in batches] != [list(range(i, i + 4)) for i in range(0, 20, 4)]


def test_accelerate_rebuilds_fail_loudly(accelerator) -> None:
    loader = accelerator.prepare(_loader())
    recipe = r"seekdata\.integrations\.accelerate\.skip_first_batches"
    with pytest.raises(RuntimeError, match=recipe):
        list(accelerator.skip_first_batches(loader, 2))
    shard = accelerate.data_loader.BatchSamplerShard(loader.batch_sampler, 2, 0)
    with pytest.raises(RuntimeError, match="BatchSamplerShard"):
        list(shard)  # what prepare would build on 2 processes without the hand-back


def test_skip_first_batches_is_a_seek_that_reads_no_skipped_data(accelerator) -> None:
    loader = accelerator.prepare(_loader())
    assert integration.skip_first_batches(loader, 3) is loader
    rest = list(loader)
    assert _same(rest, list(_loader())[3:])
    assert loader.dataset.fetched == 2 * 4  # only the two batches left in the epoch
    # after a restored state, skipping to the same batch does not skip twice
    again = _loader()
    it = iter(again)
    next(it), next(it), next(it)
    resumed = _loader()
    resumed.load_state_dict(again.state_dict())
    integration.skip_first_batches(resumed, 3)
    assert _same(list(resumed), rest)


def test_skip_first_batches_of_other_loaders_is_accelerates(accelerator) -> None:
    plain = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
    assert [b.tolist() for b in integration.skip_first_batches(plain, 3)] == [[6, 7], [8, 9]]


def test_prepare_refuses_split_batches_naming_the_recipe() -> None:
    config = accelerate.DataLoaderConfiguration(split_batches=True)
    accelerator = accelerate.Accelerator(cpu=True, dataloader_config=config)
    with pytest.raises(ValueError, match=r"split_batches.*batch_size = global batch"):
        accelerator.prepare(_loader())


def test_sharding_a_loader_for_two_processes() -> None:
    loader = _loader()
    loader.shard(2, 1)
    reference = seekdata.DistributedSampler(range(20), num_replicas=2, rank=1, seed=5)
    assert [i for b in loader.batch_sampler for i in b] == list(reference)
    mine = seekdata.DistributedSampler(range(20), num_replicas=2, rank=0, seed=5)
    loader = seekdata.StatefulDataLoader(Noisy(), batch_size=4, sampler=mine, seed=5)
    loader.shard(2, 0)  # already rank 0 of 2: kept
    with pytest.raises(ValueError, match="rank 0 of 2 but this process is rank 1 of 2"):
        loader.shard(2, 1)
    plain = torch.utils.data.RandomSampler(range(20))
    loader = seekdata.StatefulDataLoader(Noisy(), batch_size=4, sampler=plain)
    loader.shard(1, 0)  # one process: nothing to shard
    with pytest.raises(ValueError, match="can shard only its own sampler"):
        loader.shard(2, 0)


@pytest.mark.slow
def test_two_processes_save_state_load_state_resume_exactly(tmp_path: Path) -> None:
    """2 gloo processes, Dropout, augmentation through global RNG: a run saved after step 3 and
    resumed in fresh processes (with 2 workers instead of 0) matches the uninterrupted run."""
    results = {}
    for phase, workers in (("full", "0"), ("resume", "2")):
        with gloo_job("_accelerate_worker.py", tmp_path, phase, workers, "3", "8") as job:
            for p in job.procs:
                p.wait(timeout=120)
            assert all(p.returncode == 0 for p in job.procs), job.logs()
        results[phase] = [
            json.loads((tmp_path / phase / f"result{r}.json").read_text()) for r in range(2)
        ]
    full, resumed = results["full"], results["resume"]
    for rank in range(2):
        assert full[rank]["world"] == 2
        assert resumed[rank]["losses"] == full[rank]["losses"][3:]
        assert resumed[rank]["seen"] == full[rank]["seen"][3:]
        assert resumed[rank]["params"] == full[rank]["params"]
    # each epoch (4 steps × 2 ranks × 3 samples) covers the 24 samples once: none lost or repeated
    for first in (0, 4):
        epoch = [i for r in range(2) for batch in full[r]["seen"][first : first + 4] for i in batch]
        assert sorted(epoch) == list(range(24))
