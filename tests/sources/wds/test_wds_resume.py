"""Resume over webdataset shards: TarShards + order="shards" + seekdata's StatefulDataLoader.

Exact resume mid-shard and at epoch ends with another worker count, elastic resume from 2
ranks to 3, the shard-local order's invariants (a permutation that keeps reads local), and
augmentation that does not depend on the worker count.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import torch
import webdataset as wds

import seekdata
from seekdata.order import Shards
from seekdata.testing import assert_exact_resume
from seekdata.transforms import TransformedDataset
from seekdata.wds import TarShards

SIZES = (7, 3, 9, 7, 1, 8)  # samples per shard: uneven on purpose, one shard of 1
N = sum(SIZES)
SEED = 11
BATCH = 4
STEPS = -(-N // BATCH)  # batches per epoch on one rank: 9, the last one short


def write_shards(directory: pathlib.Path, sizes: tuple[int, ...] = SIZES) -> str:
    """Shards shard-000.tar, ... with ``sizes[s]`` samples each; returns their brace pattern."""
    i = 0
    for s, size in enumerate(sizes):
        with wds.TarWriter(str(directory / f"shard-{s:03d}.tar")) as sink:
            for _ in range(size):
                sink.write({"__key__": f"s{i:04d}", "bin": i.to_bytes(2, "little") * 4, "cls": i})
                i += 1
    return str(directory / f"shard-{{000..{len(sizes) - 1:03d}}}.tar")


def augment(sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """A random flip of the bytes and a random vector, both from the sample's stream."""
    data = sample["bin"][::-1] if rng.random() < 0.5 else sample["bin"]
    return {**sample, "bin": data, "aug": torch.from_numpy(rng.normal(size=3))}


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Keys stay strings; bytes become a uint8 tensor; ``aug`` (if any) is stacked."""
    data = [torch.frombuffer(bytearray(s["bin"]), dtype=torch.uint8) for s in samples]
    batch: dict[str, Any] = {"key": [s["__key__"] for s in samples], "bin": torch.stack(data)}
    if "aug" in samples[0]:
        batch["aug"] = torch.stack([s["aug"] for s in samples])
    return batch


@pytest.fixture(scope="module")
def pattern(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="module")
def shards(pattern: str) -> TarShards:
    return TarShards(pattern)


class Augmented(TransformedDataset):
    """``TransformedDataset`` over shards, passing on the shard layout order="shards" reads."""

    @property
    def shard_sizes(self) -> list[int]:
        return self.dataset.shard_sizes


@pytest.fixture(scope="module")
def augmented(shards: TarShards) -> Augmented:
    return Augmented(shards, augment)


def make(
    ds: Any,
    *,
    num_workers: int = 0,
    world: int = 1,
    rank: int = 0,
    order: Any = "shards",
    batch_size: int = BATCH,
) -> seekdata.StatefulDataLoader:
    sampler = seekdata.DistributedSampler(ds, world, rank, order=order, seed=SEED)
    return seekdata.StatefulDataLoader(
        ds,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        seed=SEED,
    )


def index_of(ds: TarShards) -> dict[str, int]:
    return {ds.key_of(i): i for i in range(len(ds))}


def mid_shard(ds: TarShards, stop: int) -> bool:
    """Whether stopping after ``stop`` steps of the 1-rank run leaves some shard half read."""
    epoch, step = divmod(stop, STEPS)
    order = seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=SEED)
    read = order.indices(epoch, np.arange(min(step * BATCH, N))).tolist()
    counts = np.bincount([ds.shard_of(i) for i in read], minlength=len(SIZES))
    return any(0 < c < size for c, size in zip(counts.tolist(), SIZES, strict=True))


# -- exact resume -------------------------------------------------------------------


@pytest.mark.parametrize("set_epoch", [False, True], ids=["rollover", "set_epoch"])
def test_exact_resume_at_every_step(augmented: Augmented, set_epoch: bool) -> None:
    checked = assert_exact_resume(lambda **kw: make(augmented, **kw), epochs=2, set_epoch=set_epoch)
    assert checked == 2 * STEPS + 1  # 0 and both epoch ends included


STOPS = (2, 6, STEPS, STEPS + 3, 2 * STEPS)  # mid-shard, epoch end, mid-shard, end of the run


def test_chosen_stops_fall_mid_shard_and_at_epoch_ends(shards: TarShards) -> None:
    assert [mid_shard(shards, s) for s in STOPS] == [True, True, False, True, False]


@pytest.mark.parametrize("before, after", [(0, 2), (2, 0)], ids=["w0-to-w2", "w2-to-w0"])
def test_exact_resume_with_another_worker_count(
    augmented: Augmented, before: int, after: int
) -> None:
    assert_exact_resume(
        lambda **kw: make(augmented, **{"num_workers": before, **kw}),
        epochs=2,
        stop_at=STOPS,
        resume_kwargs={"num_workers": after},
    )


# -- elastic resume -----------------------------------------------------------------


def global_stream(per_rank: list[list[str]], start: int, world: int) -> dict[int, str]:
    """Global position -> key, from each rank's keys in order (rank r holds start + r + k*W)."""
    out: dict[int, str] = {}
    for rank, keys in enumerate(per_rank):
        for k, key in enumerate(keys):
            out[start + rank + k * world] = key
    return out


def test_elastic_resume_from_two_ranks_to_three(augmented: Augmented) -> None:
    shards: TarShards = augmented.dataset
    two = [make(augmented, world=2, rank=r) for r in range(2)]
    iters = [iter(loader) for loader in two]
    before: list[list[dict[str, Any]]] = [[], []]
    for _ in range(2):  # two steps in lockstep: 2 ranks x 2 steps x 4 samples = 16 positions
        for rank, it in enumerate(iters):
            before[rank].append(next(it))
    state = two[0].state_dict()
    assert state == two[1].state_dict() and state["position"] == 16
    assert mid_shard(shards, 4)  # 16 positions = 4 steps of one rank: some shard is half read
    del iters, two

    # rank 1 of the new world runs with 2 workers: world size and num_workers change at once
    three = [make(augmented, world=3, rank=r, num_workers=2 if r == 1 else 0) for r in range(3)]
    for loader in three:
        loader.load_state_dict(json.loads(json.dumps(state)))
    rest = [[b for b in loader] for loader in three]  # the rest of epoch 0
    nxt = [[b for b in loader] for loader in three]  # epoch 1: rolls over on all three

    def keys(batches: list[dict[str, Any]]) -> list[str]:
        return [k for b in batches for k in b["key"]]

    consumed = [k for r in before for k in keys(r)]
    resumed = [k for r in rest for k in keys(r)]
    padding = -(N - 16) % 3  # 19 positions left over 3 ranks: 2 padded from the rest's head
    assert padding == 2 and len(resumed) == N - 16 + padding
    assert set(consumed) | set(resumed) == set(index_of(shards))  # nothing lost
    assert len(set(consumed)) == len(consumed) and len(set(resumed)) == len(resumed) - padding
    assert not set(consumed) & set(resumed)  # nothing consumed reappears

    # the same global stream as one uninterrupted rank; positions past n pad from the head of
    # the partition: the rest (from 16) in epoch 0, the epoch's head in epoch 1

    one = seekdata.DistributedSampler(shards, 1, 0, order="shards", seed=SEED)
    for epoch, origin, streams in (
        (0, 16, {**global_stream([keys(r) for r in before], 0, 2),
                 **global_stream([keys(r) for r in rest], 16, 3)}),
        (1, 0, global_stream([keys(r) for r in nxt], 0, 3)),
    ):  # fmt: skip
        positions = sorted(streams)
        assert positions == list(range(len(positions))) and len(positions) >= N
        pos = np.array(positions)
        want = one.indices(epoch, np.where(pos < N, pos, origin + (pos - origin) % (N - origin)))
        want = want.tolist()
        assert [streams[p] for p in positions] == [shards.key_of(i) for i in want]

    # every sample got the augmentation a single main-process rank gives it
    ref = single_rank_augmentations(augmented, num_workers=0, epochs=2)
    got = [
        ((epoch, k), b["bin"][j], b["aug"][j])
        for epoch, parts in ((0, before + rest), (1, nxt))
        for part in parts
        for b in part
        for j, k in enumerate(b["key"])
    ]
    assert len({key for key, _, _ in got}) == 2 * N
    for key, data, aug in got:  # padded repeats included
        assert torch.equal(data, ref[key][0]) and torch.equal(aug, ref[key][1]), key


# -- the shard-local order ----------------------------------------------------------


def windows_of(ds: TarShards, indices: list[int]) -> list[set[int]]:
    """Cut a stream into the shortest runs that each hold whole shards; their shard sets."""
    runs: list[set[int]] = []
    current: set[int] = set()
    count = 0
    for i in indices:
        current.add(ds.shard_of(i))
        count += 1
        if count == sum(SIZES[s] for s in current):
            runs.append(current)
            current, count = set(), 0
    assert not current, "the stream ended inside a run: not every shard was read whole"
    return runs


@pytest.mark.parametrize("window", [1, 2, 4])
def test_shard_order_is_a_local_permutation_every_epoch(shards: TarShards, window: int) -> None:
    sampler = seekdata.DistributedSampler(shards, 1, 0, order=Shards(window=window), seed=SEED)
    epochs = [sampler.indices(e, np.arange(N)).tolist() for e in range(4)]
    for indices in epochs:
        assert sorted(indices) == list(range(N))
        runs = windows_of(shards, indices)
        assert max(len(r) for r in runs) <= window  # a reader is in <= window shards at a time
        if window > 1:
            assert max(len(r) for r in runs) > 1  # ... and samples do mix across shards
        assert len(runs) >= -(-len(SIZES) // window)
    assert len({tuple(e) for e in epochs}) == 4  # every epoch is shuffled anew
    assert epochs[0] != list(range(N))

    # what the loader reads is that order, epoch after epoch
    loader = make(shards, order=Shards(window=window))
    index = index_of(shards)
    for epoch in range(2):
        loader.set_epoch(epoch)
        assert [index[k] for b in loader for k in b["key"]] == epochs[epoch]


# -- augmentation -------------------------------------------------------------------


def single_rank_augmentations(
    ds: Augmented, *, num_workers: int, epochs: int, batch_size: int = BATCH
) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]:
    loader = make(ds, num_workers=num_workers, batch_size=batch_size)
    out = {}
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for b in loader:
            out.update({(epoch, k): (b["bin"][j], b["aug"][j]) for j, k in enumerate(b["key"])})
    return out


def test_augmentation_does_not_depend_on_worker_count(augmented: Augmented) -> None:
    shards: TarShards = augmented.dataset
    main = single_rank_augmentations(augmented, num_workers=0, epochs=2)
    workers = single_rank_augmentations(augmented, num_workers=2, epochs=2, batch_size=5)
    assert main.keys() == workers.keys() and len(main) == 2 * N
    for seen, (data, aug) in main.items():
        assert torch.equal(data, workers[seen][0]) and torch.equal(aug, workers[seen][1])
    # ... and it is the sample's own stream, (seed, epoch, index), reproducible outside a loader
    index = index_of(shards)
    for (epoch, key), (data, aug) in main.items():
        want = augment(shards[index[key]], seekdata.sample_generator(SEED, epoch, index[key]))
        assert bytes(data.tolist()) == want["bin"] and torch.equal(aug, want["aug"])
    # a sample is augmented anew each epoch
    assert all(not torch.equal(main[0, k][1], main[1, k][1]) for k in index)


def test_transformed_dataset_keeps_the_shard_layout() -> None:
    class Sharded(torch.utils.data.Dataset):
        shard_sizes = (3, 4)

        def __len__(self) -> int:
            return 7

        def __getitem__(self, i: int) -> int:
            return i

    wrapped = TransformedDataset(Sharded(), lambda x, rng: x)
    sampler = seekdata.DistributedSampler(wrapped, 1, 0, order="shards")
    assert sorted(sampler) == list(range(7))
    with pytest.raises(ValueError, match="needs a dataset with shard_sizes"):
        seekdata.DistributedSampler(
            TransformedDataset(list(range(7)), lambda x, r: x), 1, 0, order="shards"
        )


def test_shards_in_another_order_or_other_shards_are_refused(tmp_path: pathlib.Path) -> None:
    """An unsorted glob on a new node gives the same shards in another order: equal sizes, so
    the length and shard sizes agree, but other samples at each index. The state records
    what decides the samples (each shard's keys and member sizes, in order), refused through
    the loader's and the sampler's state alike; a copy of the same shards elsewhere loads."""
    import shutil

    from seekdata.wds import TarShards
    from tests.helpers.shards import write_shards

    (tmp_path / "a").mkdir()
    pattern = write_shards(tmp_path / "a", n=40, per_shard=10)
    names = sorted(str(p) for p in (tmp_path / "a").glob("shard-*.tar"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    saved = TarShards(names)
    loader = seekdata.StatefulDataLoader(saved, batch_size=4, shuffle=True, seed=3,
                                         collate_fn=list)  # fmt: skip
    it = iter(loader)
    next(it)
    sampler = seekdata.DistributedSampler(saved, 1, 0, seed=3)
    for state in (json.loads(json.dumps(loader.state_dict())), sampler.state_dict()):
        assert state["dataset"] == saved.stream_signature
        elsewhere = [n.replace(str(tmp_path / "a"), str(tmp_path / "b")) for n in names]
        for same in (TarShards(pattern), TarShards(elsewhere)):
            seekdata.StatefulDataLoader(same, batch_size=4, shuffle=True, seed=3).load_state_dict(
                state
            )
        for other in (TarShards([names[1], names[0], *names[2:]]), TarShards(names[:3])):
            again = seekdata.StatefulDataLoader(other, batch_size=4, shuffle=True, seed=3)
            before = again.state_dict()
            with pytest.raises(seekdata.StateMismatchError):
                again.load_state_dict(state)
            assert again.state_dict() == before
        if state["kind"] == "sampler":
            reversed_shards = seekdata.DistributedSampler(TarShards(names[::-1]), 1, 0, seed=3)
            with pytest.raises(seekdata.StateMismatchError, match="dataset"):
                reversed_shards.load_state_dict(state)
