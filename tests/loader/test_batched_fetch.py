"""Batched fetch: a dataset with ``__getitems__`` reads each batch in one call, as torch calls it,
under the batch's counters — and resumes exactly at every step at any ``num_workers``.

Hugging Face ``datasets`` tables are built in code (no hub access)."""

from __future__ import annotations

import json
import random
from typing import Any

import datasets
import numpy as np
import pytest
import torch

import seekdata
from seekdata import rng
from seekdata._core import rngkeys as _rngkeys

N, BATCH = 40, 4  # 10 steps an epoch


def noisy(batch: dict[str, list[Any]]) -> dict[str, torch.Tensor]:
    """A batched transform on torch's global RNG, as a ``set_transform`` augmentation is."""
    x = torch.tensor(batch["x"])
    return {"id": torch.tensor(batch["id"]), "x": x + torch.rand(x.shape)}


def table(transform: bool) -> datasets.Dataset:
    ds = datasets.Dataset.from_dict({"id": list(range(N)), "x": [[float(i)] * 3 for i in range(N)]})
    if transform:
        ds.set_transform(noisy)
        return ds
    return ds.with_format("torch")


def loader(ds: Any, workers: int = 0, **kwargs: Any) -> seekdata.StatefulDataLoader:
    kwargs = {"batch_size": BATCH, "shuffle": True, "seed": 3, **kwargs}
    kwargs.setdefault("persistent_workers", workers > 0)
    return seekdata.StatefulDataLoader(ds, num_workers=workers, **kwargs)


def take(loader: Any, count: int) -> list[Any]:
    """``count`` batches from the loader's cursor on, across epoch ends."""
    out: list[Any] = []
    for _ in range(count + 2):  # an iter() at an epoch's end may give nothing, never twice
        if len(out) == count:
            break
        out += [b for _, b in zip(range(count - len(out)), iter(loader), strict=False)]
    assert len(out) == count
    return out


def same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


class Counting(torch.utils.data.Dataset):
    """Rows with a batched read that counts its calls and draws from every random source."""

    def __init__(self, n: int = N) -> None:
        self.n, self.calls = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, float]:
        return i, float(seekdata.sample_rng().random())

    def __getitems__(self, indices: list[int]) -> list[tuple[int, Any]]:
        self.calls += 1
        assert type(indices) is list  # as torch passes it
        g = seekdata.sample_rng().random(len(indices))
        t, n, r = torch.rand(len(indices)), np.random.rand(len(indices)), random.random()
        return [(i, (g[k], float(t[k]), n[k], r)) for k, i in enumerate(indices)]


# --- exact resume ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", [False, True])
@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2)])
def test_an_hf_table_resumes_exactly_at_every_step_on_other_workers(
    transform: bool, before: int, after: int
) -> None:
    ds = table(transform)
    run = loader(ds, before)
    full, states = [], [json.loads(json.dumps(run.state_dict()))]
    for _ in range(2):  # two epochs: states at both epoch ends too
        for batch in run:
            full.append(batch)
            states.append(json.loads(json.dumps(run.state_dict())))
    assert len(full) == 2 * N // BATCH
    assert sorted(torch.cat([b["id"] for b in full[:10]]).tolist()) == list(range(N))
    if transform:  # the augmentation draws: batches are not the bare rows
        assert not torch.equal(full[0]["x"][:, 0], full[0]["id"].float())
    resumed = loader(table(transform), after)  # one loader: its persistent workers serve all
    for stop, state in enumerate(states):
        resumed.load_state_dict(state)
        assert same(full[:stop] + take(resumed, len(full) - stop), full), f"stop={stop}"


def test_every_num_workers_reads_the_same_batches_one_call_each() -> None:
    counting = Counting()
    zero = [b for _ in range(2) for b in loader(counting, 0, step_rng=False)]
    assert counting.calls == 2 * N // BATCH  # one __getitems__ per batch, none per sample
    two = [b for _ in range(2) for b in loader(Counting(), 2)]
    assert all(
        torch.equal(a[0], b[0]) and all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))
        for a, b in zip(zero, two, strict=True)
    )


# --- what a batched read draws ------------------------------------------------------------------


def test_a_read_draws_from_the_batch_counters_as_the_table_says() -> None:
    seed, batches = 3, list(loader(Counting(), seed=3))
    sampler = seekdata.DistributedSampler(range(N), 1, 0, shuffle=True, seed=seed)
    order = list(iter(sampler))
    for step, (ids, (g, t, n, r)) in enumerate(batches):
        indices = order[step * BATCH : (step + 1) * BATCH]
        assert ids.tolist() == indices
        # sample_rng(): the batch's stream, seekdata.rng.read_generator
        want = rng.read_generator(seed, 0, step, indices).random(BATCH)
        assert np.array_equal(g.numpy(), want)
        # global RNG: seeded from seekdata.rng.read_seeds of (step, crc32 of the indices)
        digest = _rngkeys.batch_counters(0, step, tuple(indices))[3]
        row = rng.read_seeds(seed, 0, step, digest)
        torch.manual_seed(row[0])
        np.random.seed(row[1])
        random.seed(row[2])
        assert torch.equal(t.float(), torch.rand(BATCH))
        assert np.array_equal(n.numpy(), np.random.rand(BATCH))
        assert r.tolist() == [random.random()] * BATCH
    # and the read's stream is neither a sample's nor the batch transform's
    first = order[:BATCH]
    assert rng.read_generator(seed, 0, 0, first).random() not in (
        rng.batch_generator(seed, 0, 0, first).random(),
        seekdata.sample_generator(seed, 0, first[0]).random(),
    )


class Nested(Counting):
    """A read that draws, runs a nested sample scope (which keys the thread's sample stream),
    then draws again: the batch's stream goes on where it was."""

    def __getitems__(self, indices: list[int]) -> list[tuple[int, float]]:
        first = seekdata.sample_rng().random()
        with rng.sample_scope(0, 0, 99) as inner:
            inner.random()
        second = seekdata.sample_rng().random()
        return [(i, first if k % 2 == 0 else second) for k, i in enumerate(indices)]


def test_a_nested_sample_scope_leaves_the_batchs_stream_where_it_was() -> None:
    ids, values = next(iter(loader(Nested(), shuffle=False)))
    assert ids.tolist() == [0, 1, 2, 3]
    want = rng.read_generator(3, 0, 0, [0, 1, 2, 3]).random(2)
    assert values.tolist() == [want[0], want[1]] * 2


def test_columns_from_a_read_go_to_your_collate_fn_as_torch_passes_them() -> None:
    class Columns(Counting):
        def __getitems__(self, indices: list[int]) -> dict[str, list[int]]:
            return {"id": indices, "twice": [2 * i for i in indices]}

    batch = next(iter(loader(Columns(), shuffle=False, collate_fn=lambda cols: cols)))
    assert batch == {"id": [0, 1, 2, 3], "twice": [0, 2, 4, 6]}


def test_the_callers_global_rng_is_left_as_it_was_without_workers() -> None:
    torch.manual_seed(11)
    np.random.seed(11)
    random.seed(11)
    before = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    for _ in loader(Counting(), step_rng=False):
        pass
    failed = list(outcomes(loader(Broken(ValueError), step_rng=False)))  # a read that raises
    assert sum(isinstance(e, ValueError) for e in failed) == 1
    assert torch.equal(torch.get_rng_state(), before[0])
    assert np.array_equal(np.random.get_state()[1], before[1]) and random.getstate() == before[2]


# --- which datasets read in batches, and how to turn it off --------------------------------------


class PerSample(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[int, float]:
        return i, float(seekdata.sample_rng().random())


def per_sample_keys(batches: list[Any], seed: int = 3) -> bool:
    """Each sample drew its own stream, seekdata.sample_generator(seed, 0, index)."""
    return all(
        v == seekdata.sample_generator(seed, 0, int(i)).random()
        for ids, values in batches
        for i, v in zip(ids, values.tolist(), strict=True)
    )


def test_batched_fetch_false_keys_every_sample_as_before() -> None:
    counting = Counting()
    batches = list(loader(counting, batched_fetch=False))
    assert counting.calls == 0 and per_sample_keys(batches)
    ds = table(True)  # an HF table, sample by sample: each sample's augmentation is its own
    ours = list(loader(ds, 2, batched_fetch=False))
    for batch in ours:
        for i, x in zip(batch["id"].tolist(), batch["x"], strict=True):
            with rng.sample_scope(3, 0, i):
                assert torch.equal(x, ds[i]["x"])
    with pytest.raises(TypeError, match="batched_fetch must be"):
        seekdata.StatefulDataLoader(ds, batched_fetch="yes")  # type: ignore[arg-type]


def test_torchs_wrappers_read_in_batches_only_over_a_batched_read() -> None:
    Subset, Stack = torch.utils.data.Subset, torch.utils.data.StackDataset
    assert per_sample_keys(list(loader(Subset(PerSample(), range(N)))))
    counting = Counting()
    list(loader(Subset(counting, range(N))))
    assert counting.calls == N // BATCH
    counting = Counting()
    list(loader(Stack(counting, PerSample()), collate_fn=list))
    assert counting.calls == 0  # one part reads per sample: the whole stack does
    list(loader(Stack(counting, Counting()), collate_fn=list))
    assert counting.calls == N // BATCH


def test_another_world_size_keeps_every_samples_identity() -> None:
    ds = table(True)

    def ranks(world: int, batch: int) -> list[seekdata.StatefulDataLoader]:
        return [
            seekdata.StatefulDataLoader(
                ds, batch_size=batch, seed=3, sampler=seekdata.DistributedSampler(ds, world, rank)
            )
            for rank in range(world)
        ]

    def ids(loaders: list[Any], steps: int) -> list[list[int]]:
        its = [iter(x) for x in loaders]
        return [sorted(i for it in its for i in next(it)["id"].tolist()) for _ in range(steps)]

    reference = ids(ranks(1, 8), 5)
    two = ranks(2, 4)
    assert ids(two, 2) == reference[:2]
    one = ranks(1, 8)[0]
    one.load_state_dict(two[0].state_dict())  # the same global batch, re-formed on one rank
    assert ids([one], 3) == reference[2:]


# --- errors ---------------------------------------------------------------------------------------


class Broken(Counting):
    """A batched read that fails at the batch holding sample 9: it raises ``error`` or, with
    ``short``, returns one sample too few."""

    def __init__(self, error: type[Exception] | None = None, short: bool = False) -> None:
        super().__init__()
        self.error, self.short = error, short

    def __getitems__(self, indices: list[int]) -> Any:
        rows = super().__getitems__(indices)
        if 9 in indices:
            if self.error is not None:
                raise self.error("corrupt row 9")
            return rows[:-1] if self.short else iter(rows)
        return rows


def outcomes(loader: Any) -> Any:
    """Every step of one epoch from the cursor: (ids, values) of a batch, or the error raised."""
    it = iter(loader)
    while True:
        try:
            ids, values = next(it)
            yield ids.tolist(), values[0].tolist()
        except StopIteration:
            return
        except Exception as e:  # the test looks at whichever error it is
            yield e


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("dataset", "error", "says"),
    [
        (Broken(KeyError), KeyError, "corrupt row 9"),
        (Broken(short=True), ValueError, "returned 3 samples; __getitems__ must return one"),
        (Broken(), TypeError, "returned list_iterator, which has no len()"),
        # torch's iterator takes a StopIteration for the epoch's end: it is the batch's error
        (Broken(StopIteration), RuntimeError, "raised StopIteration, which would end the epoch"),
    ],
    ids=["raises", "short", "no-len", "stop-iteration"],
)
def test_a_failing_read_is_that_batchs_error_naming_the_dataset_and_the_batch(
    workers: int, dataset: Broken, error: type[Exception], says: str
) -> None:
    # not persistent: torch's persistent workers that carried an error make the next loader's
    # shutdown wait ~10 s (torch 2.13, its own DataLoader too)
    run = loader(dataset, workers, persistent_workers=False)
    got = list(outcomes(run))
    assert len(got) == N // BATCH  # the failed batch counts; the epoch goes on
    (failed,) = [(k, e) for k, e in enumerate(got) if isinstance(e, Exception)]
    step, e = failed
    assert isinstance(e, error)
    text = str(e) + "".join(getattr(e, "__notes__", []))
    assert says in text and "Broken.__getitems__ read batch " in text
    assert f"batch {step} of epoch 0 (4 indices: [" in text
    assert run.state_dict()["step"] == N // BATCH


def test_a_read_that_raises_resumes_exactly_after_it() -> None:
    run = loader(Broken(ValueError), 0)
    full, states = [], [run.state_dict()]
    for step in outcomes(run):
        full.append(repr(step) if isinstance(step, Exception) else step)
        states.append(run.state_dict())
    assert "ValueError('corrupt row 9')" in full
    resumed = loader(Broken(ValueError), 2, persistent_workers=False)
    for stop, state in enumerate(states):
        resumed.load_state_dict(state)
        rest = [step if isinstance(step, tuple) else "error" for step in outcomes(resumed)]
        want = [step if isinstance(step, tuple) else "error" for step in full]
        assert [*want[:stop], *rest] == want, f"stop={stop}"
