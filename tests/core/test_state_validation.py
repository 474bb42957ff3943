"""Nothing silent at resume: a state is exact, or refused whole with the field and the fix."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from tests.helpers.datasets import GlobalRNGAug, batches_equal


def indices(batches: list) -> list[int]:
    return [int(i) for b in batches for i in b["index"]]


# --- issue 11.2: a sampler that cannot seek refuses a world-size change mid-epoch -------------


def torch_ranks(world: int, n: int = 12) -> list[seekdata.StatefulDataLoader]:
    ds = GlobalRNGAug(n)
    return [
        seekdata.StatefulDataLoader(
            ds,
            batch_size=2,
            sampler=torch.utils.data.DistributedSampler(ds, num_replicas=world, rank=r, seed=3),
            seed=3,
        )
        for r in range(world)
    ]


def consume(loaders: list[seekdata.StatefulDataLoader], steps: int) -> dict:
    iters = [iter(x) for x in loaders]
    for it in iters:
        for _ in range(steps):
            next(it)
    state = loaders[0].state_dict()
    assert all(x.state_dict() == state for x in loaders)
    return json.loads(json.dumps(state))


def test_replay_sampler_refuses_another_world_size_mid_epoch() -> None:
    """12 samples, batch 2, 2 ranks, 1 step: on 3 ranks samples were silently lost before."""
    state = consume(torch_ranks(2), 1)
    assert state["world_size"] == 2
    for loader in torch_ranks(3):
        before = loader.state_dict()
        with pytest.raises(seekdata.StateMismatchError, match=r"world_size is 2 .* but 3 here"):
            loader.load_state_dict(state)
        with pytest.raises(seekdata.StateMismatchError, match=r"seekdata\.DistributedSampler"):
            loader.load_state_dict(state, strict=False)  # losing data is never a choice
        assert loader.state_dict() == before


def test_replay_sampler_resumes_exactly_on_the_same_world_size() -> None:
    ref = [list(x) for x in torch_ranks(2)]
    state = consume(torch_ranks(2), 1)
    resumed = torch_ranks(2)
    for x in resumed:
        x.load_state_dict(state)
    with pytest.warns(UserWarning, match="cannot seek"):
        rest = [list(x) for x in resumed]
    assert all(batches_equal(r[1:], got) for r, got in zip(ref, rest, strict=True))


def test_replay_sampler_accepts_another_world_size_at_an_epoch_boundary() -> None:
    two = torch_ranks(2)
    for x in two:
        list(x)  # the whole epoch 0
    state = two[0].state_dict()
    three = torch_ranks(3)
    for x in three:
        x.load_state_dict(state)
        x.set_epoch(1)
    got = sorted(indices([b for x in three for b in x]))
    assert got == list(range(12))  # epoch 1, all of it, on 3 ranks


# --- issue 11.3: elastic padding pads from the head of the rest --------------------------------


def seek_ranks(world: int, n: int = 10) -> list[seekdata.StatefulDataLoader]:
    ds = GlobalRNGAug(n)
    return [
        seekdata.StatefulDataLoader(
            ds, batch_size=1, sampler=seekdata.DistributedSampler(ds, world, r, seed=1), seed=1
        )
        for r in range(world)
    ]


def test_elastic_padding_never_repeats_a_consumed_sample() -> None:
    """10 samples, 2 ranks x 2 steps = 4 consumed; 6 left on 4 ranks: 2 padding samples. They
    came from the epoch's head (consumed samples) before; now from the head of the rest."""
    two = seek_ranks(2)
    iters = [iter(x) for x in two]
    consumed = [int(next(it)["index"]) for _ in range(2) for it in iters]
    state = two[0].state_dict()
    four = seek_ranks(4)
    for x in four:
        x.load_state_dict(state)
    rest = indices([b for x in four for b in x])
    assert len(rest) == 8 and set(rest) == set(range(10)) - set(consumed)
    assert not set(rest) & set(consumed)


def test_a_second_resume_on_the_new_world_size_keeps_its_padding() -> None:
    """2 -> 3 ranks, then a checkpoint on 3 ranks resumed on 3: the padding of the 3-rank
    partition is kept (the state carries where the partition began), so it stays exact."""
    n = 11
    two = seek_ranks(2, n)
    for it in [iter(x) for x in two]:
        next(it)  # 2 consumed; 9 left
    state = two[0].state_dict()

    def three_from(s: dict) -> list[seekdata.StatefulDataLoader]:
        loaders = seek_ranks(3, n)
        for x in loaders:
            x.load_state_dict(s)
        return loaders

    ref = [list(x) for x in three_from(state)]  # 3 steps per rank, no padding needed
    three = three_from(state)
    for it in [iter(x) for x in three]:
        next(it)
    mid = json.loads(json.dumps(three[0].state_dict()))
    assert mid["origin"] == 2 and mid["world_size"] == 3
    again = [list(x) for x in three_from(mid)]
    assert all(batches_equal(r[1:], a) for r, a in zip(ref, again, strict=True))


# --- issue 11.4: validate everything, then assign; step and world_size in range ----------------


def make() -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, shuffle=True, seed=5)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("step", -1, r"state\['step'\] must be >= 0"),
        ("step", 10**6, r"state\['step'\] must be in \[0, 3\]"),
        ("world_size", 0, r"state\['world_size'\] must be >= 1"),
        ("origin", 7, r"state\['origin'\] must be <= state\['position'\]"),
        ("origin", -1, r"state\['origin'\] must be >= 0"),
    ],
)
def test_a_refused_state_leaves_the_loader_untouched(field, value, match) -> None:
    donor = make()
    it = iter(donor)
    next(it)
    state = donor.state_dict()  # epoch 0, position 3, step 1
    state[field] = value
    loader = make()
    before = loader.state_dict()
    with pytest.raises(seekdata.StateMismatchError, match=match):
        loader.load_state_dict(state)
    assert loader.state_dict() == before
    assert batches_equal(list(loader), list(make()))  # the next batch is a fresh loader's


def test_step_at_its_bound_is_accepted() -> None:
    loader = make()
    list(loader)
    state = loader.state_dict()
    assert state["step"] == 4 and state["position"] == 10
    make().load_state_dict(state)


# --- issue 11.5: iterable states are checked against num_workers and their structure -----------


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for k in range(wid, 8, nw):
            yield torch.tensor(k), torch.rand(1)


@pytest.fixture
def quiet_fast_forward_logs(caplog):
    caplog.set_level(logging.ERROR)


def stream(workers: int = 0) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=workers, seed=1)


def test_iterable_state_from_another_worker_count_is_refused(quiet_fast_forward_logs) -> None:
    donor = stream(2)
    it = iter(donor)
    next(it)
    state = donor.state_dict()
    del it
    loader = stream(0)
    with pytest.raises(seekdata.StateMismatchError, match=r"num_workers is 2 .* but 0 here"):
        loader.load_state_dict(state)
    assert [b[0].tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # untouched
    zero = stream(0)
    zit = iter(zero)
    next(zit)
    with pytest.raises(seekdata.StateMismatchError, match="pass num_workers=0"):
        stream(2).load_state_dict(zero.state_dict())


@pytest.mark.parametrize(
    "engine, match",
    [
        ({}, "must be the non-empty dict"),
        (None, "must be the non-empty dict"),
        ({"x": 1}, "not a torchdata state"),
        ({"_snapshot": {}}, "incomplete torchdata worker state"),
    ],
)
def test_iterable_engine_state_is_validated(engine, match) -> None:
    loader = stream(0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    state["engine"] = engine
    fresh = stream(0)
    with pytest.raises(seekdata.StateMismatchError, match=match):
        fresh.load_state_dict(state)
    assert len(list(fresh)) == 4


def test_iterable_state_from_another_world_size_is_refused() -> None:
    loader = stream(0)
    state = loader.state_dict()
    state["world_size"] = 2
    with pytest.raises(seekdata.StateMismatchError, match=r"world_size is 2 .* but 1 here"):
        stream(0).load_state_dict(state)


# --- issue 11.6: set_epoch below a restored epoch warns, naming both ---------------------------


def restored_at_epoch_3(build):
    loader = build()
    loader.set_epoch(3)
    it = iter(loader)
    next(it)
    resumed = build()
    resumed.load_state_dict(loader.state_dict())
    return resumed


@pytest.mark.parametrize(
    "build",
    [
        make,
        lambda: seekdata.StatefulDataLoader(
            GlobalRNGAug(10), batch_size=2, sampler=list(range(10)), seed=5
        ),
        lambda: stream(0),
    ],
    ids=["seekable", "replay", "iterable"],
)
def test_set_epoch_below_the_restored_epoch_warns(build, quiet_fast_forward_logs) -> None:
    resumed = restored_at_epoch_3(build)
    with pytest.warns(UserWarning, match=r"set_epoch\(0\) is below the restored epoch 3"):
        resumed.set_epoch(0)
    assert resumed.state_dict()["epoch"] == 0  # obeyed, as torch would
    ok = restored_at_epoch_3(build)
    ok.set_epoch(3)  # the right start_epoch: silent, and the position is kept
    ok.set_epoch(4)
    assert ok.state_dict()["epoch"] == 4


def test_sampler_set_epoch_below_the_restored_epoch_warns() -> None:
    s = seekdata.DistributedSampler(range(10), 1, 0, seed=1)
    s.set_epoch(2)
    state = s.state_dict()
    again = seekdata.DistributedSampler(range(10), 1, 0, seed=1)
    again.load_state_dict(state)
    with pytest.warns(UserWarning, match=r"set_epoch\(1\) is below the restored epoch 2"):
        again.set_epoch(1)


# --- issue 11.7: shuffle with a sampler is torch's error ---------------------------------------


@pytest.mark.parametrize(
    "kwargs, which",
    [
        ({"sampler": torch.utils.data.SequentialSampler(range(4))}, "sampler"),
        ({"sampler": torch.utils.data.DistributedSampler(range(4), 1, 0)}, "sampler"),
        ({"sampler": seekdata.DistributedSampler(range(4), 1, 0)}, "sampler"),
        ({"batch_sampler": torch.utils.data.BatchSampler(range(4), 2, False)}, "batch_sampler"),
    ],
)
def test_shuffle_with_a_sampler_is_refused_as_torch_does(kwargs, which) -> None:
    with pytest.raises(ValueError, match=f"{which} option is mutually exclusive with"):
        torch.utils.data.DataLoader(range(4), shuffle=True, **kwargs)
    with pytest.raises(ValueError, match=f"{which} option is mutually exclusive with"):
        seekdata.StatefulDataLoader(range(4), shuffle=True, seed=0, **kwargs)
    seekdata.StatefulDataLoader(range(4), shuffle=False, seed=0, **kwargs)  # torch accepts it


# --- issue 11.8: what is exact on another world size -------------------------------------------


def test_the_same_global_batch_on_another_world_size_sees_the_same_samples() -> None:
    """Step s covers global positions [s*B*W, (s+1)*B*W): 2 ranks x 4 resumed as 4 ranks x 2
    (a checked change: no strict=False, no warning) give every global step the same samples as
    before; the docs promise this, not bit-identical model math."""
    ds = GlobalRNGAug(40)

    def ranks(world: int, batch: int) -> list[seekdata.StatefulDataLoader]:
        return [
            seekdata.StatefulDataLoader(
                ds,
                batch_size=batch,
                sampler=seekdata.DistributedSampler(ds, world, r, seed=2),
                seed=2,
            )
            for r in range(world)
        ]

    def global_steps(loaders: list) -> list[list[int]]:
        per_rank = [[b["index"].tolist() for b in x] for x in loaders]
        return [sorted(i for batch in step for i in batch) for step in zip(*per_rank, strict=True)]

    ref = global_steps(ranks(2, 4))
    two = ranks(2, 4)
    for it in [iter(x) for x in two]:
        next(it)
        next(it)
    state = two[0].state_dict()
    four = ranks(4, 2)
    for x in four:
        x.load_state_dict(state)  # filterwarnings=error: no warning either
    assert global_steps(four) == ref[2:]
    assert [x.state_dict()["step"] for x in four] == [5] * 4  # the step count goes on too


@pytest.mark.parametrize(
    ("world", "batch", "fix"),
    [(4, 3, "pass batch_size=2 to keep the global batch"), (3, 2, "pass batch_size=4 \\(the same")],
)
def test_a_changed_batch_that_changes_the_global_batch_is_refused_with_the_fix(
    world, batch, fix
) -> None:
    ds = GlobalRNGAug(40)

    def loader(w: int, b: int) -> seekdata.StatefulDataLoader:
        sampler = seekdata.DistributedSampler(ds, w, 0, seed=2)
        return seekdata.StatefulDataLoader(ds, batch_size=b, sampler=sampler, seed=2)

    saved = loader(2, 4)
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(seekdata.StateMismatchError, match="must keep the global batch") as info:
        loader(world, batch).load_state_dict(state)
    assert re.search(fix, str(info.value)), str(info.value)
    loader(4, 2).load_state_dict(state)  # 4 x 2 = 2 x 4: accepted
    loader(3, 4).load_state_dict(state)  # the same per-rank batch on 3 ranks: as before
    with pytest.warns(UserWarning, match="batch_size is 4 in the checkpoint but 3 here"):
        loader(4, 3).load_state_dict(state, strict=False)


# --- round 3: found by the attack ------------------------------------------------------------


def _global_steps(n: int, world: int, batch: int, state: Any, drop: tuple[bool, bool]) -> list:
    """Every rank's batches from ``state`` (None: a fresh run), as one list per global step."""
    ranks = []
    for rank in range(world):
        sampler = seekdata.DistributedSampler(
            range(n), world, rank, shuffle=True, seed=4, drop_last=drop[0]
        )
        loader = seekdata.StatefulDataLoader(
            torch.arange(n), batch_size=batch, sampler=sampler, drop_last=drop[1], seed=4
        )
        if state is not None:
            loader.load_state_dict(state)
        ranks.append([b.tolist() for b in loader])
    return [sorted(i for batch in step for i in batch) for step in zip(*ranks, strict=True)]


@pytest.mark.parametrize(
    ("n", "old", "new", "drop"),
    [
        (100, (2, 8), (16, 1), (False, True)),  # the loader's drop_last: 6 steps, then 7
        (97, (2, 8), (1, 16), (True, False)),  # the sampler's: 6 steps, then 7
        (100, (2, 8), (16, 1), (True, False)),  # the sampler's: 7 steps, then 6
    ],
)
def test_an_elastic_resume_that_would_cut_epochs_otherwise_is_refused(n, old, new, drop) -> None:
    sampler = seekdata.DistributedSampler(range(n), old[0], 0, seed=4, drop_last=drop[0])
    saved = seekdata.StatefulDataLoader(
        torch.arange(n), batch_size=old[1], sampler=sampler, drop_last=drop[1], seed=4
    )
    it = iter(saved)
    next(it), next(it)
    state = saved.state_dict()
    sampler = seekdata.DistributedSampler(range(n), new[0], 0, seed=4, drop_last=drop[0])
    loader = seekdata.StatefulDataLoader(
        torch.arange(n), batch_size=new[1], sampler=sampler, drop_last=drop[1], seed=4
    )
    with pytest.raises(seekdata.StateMismatchError, match="cut epochs alike") as info:
        loader.load_state_dict(state)
    assert f"{old[0]} × {old[1]}" in str(info.value)  # the checkpoint's own cut fits
    with pytest.warns(UserWarning, match=r"continuing \(strict=False\) with this cut") as w:
        loader.load_state_dict(state, strict=False)
    assert w[0].filename == __file__  # the user's line, not seekdata's


def test_an_elastic_resume_that_cuts_epochs_alike_is_exact_at_every_later_step() -> None:
    n, drop = 100, (False, True)
    full = _global_steps(n, 2, 8, None, drop) + _global_steps(n, 2, 8, None, drop)
    sampler = seekdata.DistributedSampler(range(n), 2, 0, shuffle=True, seed=4)
    saved = seekdata.StatefulDataLoader(
        torch.arange(n), batch_size=8, sampler=sampler, drop_last=True, seed=4
    )
    it = iter(saved)
    next(it), next(it)
    state = saved.state_dict()
    rest = _global_steps(n, 4, 4, state, drop)  # 4 x 4 cuts 100 samples as 2 x 8 does
    assert full[2:6] == rest  # the rest of the epoch: the same samples at every step


@pytest.mark.parametrize("key", ["step", "world_size", "batch_size", "sample_seed"])
def test_a_key_the_format_requires_is_never_defaulted(key: str) -> None:
    loader = make()
    next(iter(loader))
    state = loader.state_dict()
    del state[key]
    with pytest.raises(seekdata.StateMismatchError, match=f"missing '{key}'"):
        make().load_state_dict(state)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("seed", -1, "state\\['seed'\\] must be >= 0; got -1"),
        ("sample_seed", -3, "state\\['sample_seed'\\] must be >= 0"),
        ("n", 0, "state\\['n'\\] must be >= 1"),
        ("batch_size", 0, "state\\['batch_size'\\] must be >= 1"),
        ("kind", "1", "state\\['kind'\\] must be one of 'sampler', 'loader', 'iterable'"),
    ],
)
def test_an_invalid_value_in_the_checkpoint_is_named_not_suggested(key, value, match) -> None:
    state = make().state_dict()
    state[key] = value
    with pytest.raises(seekdata.StateMismatchError, match=match) as info:
        make().load_state_dict(state)
    assert f"pass {key}={value}" not in str(info.value)


def test_an_edited_sample_seed_is_named_as_such_over_a_loader_that_adopts_its_seed() -> None:
    mix = seekdata.Mixture([range(10), range(7)], [1, 1], seed=0)
    saved = seekdata.StatefulDataLoader(mix, batch_size=2, seed=3)
    state = saved.state_dict()
    state["sample_seed"] = 5
    with pytest.raises(seekdata.StateMismatchError, match="state\\['sample_seed'\\] is 5 but"):
        seekdata.StatefulDataLoader(mix, batch_size=2).load_state_dict(state)


def test_skip_takes_numpy_integers_as_other_counters_do() -> None:
    loader = make()
    loader.skip(np.int64(2))
    loader.skip_steps(np.int64(5), np.int32(6))
    assert loader.state_dict()["step"] == 2
    with pytest.raises(TypeError, match="batches must be an int; got bool"):
        loader.skip(True)


# --- a sampler's own state checks the dataset's stream too (issue 27) --------------------------


def _sampler_state(dataset: Any, steps: int = 3) -> dict:
    sampler = seekdata.DistributedSampler(dataset, 1, 0, shuffle=False)
    it = iter(sampler)
    for _ in range(steps):
        next(it)
    return json.loads(json.dumps(sampler.state_dict()))


def _packed(tmp_path: Any, pad_id: int) -> Any:
    from seekdata.tokens import PackedDocuments

    name = tmp_path / "corpus.bin"
    if not name.exists():
        np.tile(np.array([5, 6, 7, 1, 9, 1], dtype=np.uint16), 10).tofile(name)
    return PackedDocuments(str(name), 8, eos_id=1, pad_id=pad_id)


def _mixture(a: int = 1, size: int = 6) -> seekdata.Mixture:
    return seekdata.Mixture({"a": range(size), "b": range(4)}, [a, 1], length=10, seed=1)


@pytest.mark.parametrize(
    ("saved", "here", "match"),
    [
        (lambda _: _mixture(), lambda _: _mixture(a=3), r"dataset is 'Mixture\(.* here"),
        # a source grew without mix.changed(grown=): the same length, another stream
        (lambda _: _mixture(), lambda _: _mixture(size=8), r"dataset is 'Mixture\(.* here"),
        (lambda t: _packed(t, 0), lambda t: _packed(t, 3), r"dataset is 'PackedDocuments"),
    ],
    ids=["reweighted", "undeclared-growth", "pad-id"],
)
def test_a_sampler_state_over_another_stream_is_refused(tmp_path, saved, here, match) -> None:
    """The sampler records the dataset's signature as the loader does, and both check it in a
    sampler's state: refused, and the sampler or loader left as it was."""
    old, new = saved(tmp_path), here(tmp_path)
    assert len(old) == len(new)
    state = _sampler_state(old)
    assert state["dataset"] == old.stream_signature
    seekdata.DistributedSampler(old, 1, 0, shuffle=False).load_state_dict(state)  # the same
    sampler = seekdata.DistributedSampler(new, 1, 0, shuffle=False)
    loader = seekdata.StatefulDataLoader(new, batch_size=2)
    for target in (sampler, loader):
        before = target.state_dict()
        with pytest.raises(seekdata.StateMismatchError, match=match):
            target.load_state_dict(state)
        assert target.state_dict() == before


def test_a_sampler_state_from_before_it_recorded_the_stream_still_loads() -> None:
    """A sampler state written by the previous release has no 'dataset': not checked, as then."""
    mix = _mixture()
    state = _sampler_state(mix)
    del state["dataset"]
    sampler = seekdata.DistributedSampler(mix, 1, 0, shuffle=False)
    sampler.load_state_dict(state)
    assert sampler.position == 3
    loader = seekdata.StatefulDataLoader(mix, batch_size=1)
    loader.load_state_dict(state)
    assert loader.state_dict()["position"] == 3 and "dataset" in loader.state_dict()


def test_a_changed_mixture_records_its_prefix_in_a_sampler_state_too() -> None:
    """A sampler over a changed mixture records its prefix and history: a state saved before
    the change loads into the changed mixture (it agrees on the stream consumed)."""
    mix = _mixture()
    state = _sampler_state(mix, 3)
    changed = mix.changed(state, [1, 3])
    sampler = seekdata.DistributedSampler(changed, 1, 0, shuffle=False)
    sampler.load_state_dict(state)
    it = iter(sampler)
    for _ in range(4):
        next(it)
    later = json.loads(json.dumps(sampler.state_dict()))
    assert later["source"]["prefix"] == changed.prefix_signature(7) and later["source"]["history"]
    seekdata.DistributedSampler(changed, 1, 0, shuffle=False).load_state_dict(later)
    other = seekdata.DistributedSampler(mix.changed(3, [1, 2]), 1, 0, shuffle=False)
    with pytest.raises(seekdata.StateMismatchError, match="the checkpoint changed at P=3"):
        other.load_state_dict(later)  # another change there: refused, naming it


# --- issue 35.4: what identifies the data is checked before what shapes the batches -----------


def _saved_loader(dataset: Any, **kwargs: Any) -> dict:
    loader = seekdata.StatefulDataLoader(dataset, **kwargs)
    next(iter(loader))
    return json.loads(json.dumps(loader.state_dict()))


def _refused_first(target: Any, state: dict, match: str, strict: bool = True) -> None:
    """``target.load_state_dict(state)`` is refused with ``match`` and changes nothing."""
    before = target.state_dict()
    with pytest.raises(seekdata.StateMismatchError, match=match):
        target.load_state_dict(state, strict)
    assert target.state_dict() == before


def test_another_datasets_checkpoint_with_another_batch_size_names_the_dataset_first() -> None:
    """A checkpoint of a 10000-item dataset, batch 32, loaded over 2000 items, batch 16: the
    first error is the dataset's length (its fix is the right one); following a batch-size
    fix first would only lead to the next refusal."""
    state = _saved_loader(range(10000), batch_size=32, shuffle=True, seed=0)
    here = seekdata.StatefulDataLoader(range(2000), batch_size=16, shuffle=True, seed=0)
    first = r"^StatefulDataLoader\.load_state_dict: n is 10000 in the checkpoint but 2000 here"
    _refused_first(here, state, first + "; pass the same dataset")
    # on another world size too (the global-batch rule is a batch rule: it comes after)
    sampler = seekdata.DistributedSampler(range(2000), 2, 0, shuffle=True, seed=0)
    ranked = seekdata.StatefulDataLoader(range(2000), batch_size=8, sampler=sampler, seed=0)
    _refused_first(ranked, state, r": n is 10000 in the checkpoint but 2000 here")


def test_another_stream_of_the_same_length_is_named_before_seed_and_batch_size() -> None:
    """Datasets of the same length with their own stream (a reweighted Mixture): the
    signature is refused before the seed, the batch size or drop_last that also differ, for
    the loader and for the sampler, and with a sampler's state in a loader."""
    old, new = _mixture(), _mixture(a=3)
    match = r": dataset is 'Mixture\(.* in the checkpoint but 'Mixture\(.* here"
    state = _saved_loader(old, batch_size=2, seed=1)
    _refused_first(seekdata.StatefulDataLoader(new, batch_size=3, seed=4), state, match)
    _refused_first(
        seekdata.StatefulDataLoader(new, batch_size=3, seed=4, drop_last=True), state, match
    )
    sampler_state = _sampler_state(old)
    other = seekdata.DistributedSampler(new, 1, 0, shuffle=False, seed=7, drop_last=True)
    _refused_first(other, sampler_state, match)
    _refused_first(seekdata.StatefulDataLoader(new, batch_size=3, seed=4), sampler_state, match)


def test_the_order_is_named_before_the_batches() -> None:
    """The same data under another seed and another batch size: the seed first (the order
    over the data), then the batch size once the seed is the checkpoint's."""
    state = _saved_loader(range(100), batch_size=4, shuffle=True, seed=1)
    wrong = seekdata.StatefulDataLoader(range(100), batch_size=5, shuffle=True, seed=2)
    _refused_first(wrong, state, r": seed is 1 in the checkpoint but 2 here")
    seeded = seekdata.StatefulDataLoader(range(100), batch_size=5, shuffle=True, seed=1)
    _refused_first(seeded, state, r"batch_size is 4 on 1 ranks in the checkpoint")


def test_with_strict_false_the_warnings_come_in_the_same_order() -> None:
    state = _saved_loader(range(100), batch_size=4, shuffle=True, seed=1)
    here = seekdata.StatefulDataLoader(range(90), batch_size=5, shuffle=True, seed=2)
    with pytest.warns(UserWarning) as caught:
        here.load_state_dict(state, strict=False)
    fields = [str(w.message).split(": ")[1].split(" is ")[0] for w in caught]
    assert fields == ["n", "seed", "sample_seed", "batch_size"]
