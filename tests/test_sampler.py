"""seekdata.DistributedSampler: drop-in partition, epoch-end rules, elastic O(1) resume."""

from __future__ import annotations

import io
import itertools
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler as TorchSampler

import seekdata
from seekdata import DistributedSampler


class Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def ranks(n: int, w: int, **kw) -> list[DistributedSampler]:
    return [DistributedSampler(Sized(n), w, r, **kw) for r in range(w)]


@pytest.mark.parametrize(
    "n, w, drop_last, shuffle",
    list(itertools.product([1, 3, 10, 33], [1, 2, 3, 4, 8], [False, True], [True, False])),
)
def test_order_torch_is_torch_for_every_rank_and_epoch(n, w, drop_last, shuffle) -> None:
    data = list(range(n))
    for rank, epoch in itertools.product(range(w), (0, 1, 5)):
        ref = TorchSampler(data, w, rank, shuffle=shuffle, seed=11, drop_last=drop_last)
        ours = DistributedSampler(
            data, w, rank, shuffle=shuffle, seed=11, drop_last=drop_last, order="torch"
        )
        ref.set_epoch(epoch)
        ours.set_epoch(epoch)
        assert list(ours) == list(ref)
        assert len(ours) == len(ref) and ours.total_size == ref.total_size


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 500),
    w=st.integers(1, 9),
    epoch=st.integers(0, 100),
    drop_last=st.booleans(),
    order=st.sampled_from(["feistel", "torch"]),
)
def test_ranks_are_disjoint_and_cover_the_epoch(n, w, epoch, drop_last, order) -> None:
    samplers = ranks(n, w, seed=3, drop_last=drop_last, order=order)
    for s in samplers:
        s.set_epoch(epoch)
    per_rank = [list(s) for s in samplers]
    lengths = {len(p) for p in per_rank}
    assert len(lengths) == 1  # every rank takes the same number of steps
    flat = [i for p in per_rank for i in p]
    if drop_last:
        assert len(set(flat)) == len(flat) == (n // w) * w
    else:
        assert set(flat) == set(range(n)) and len(flat) - n < w  # padding < W
    assert all(s.state_dict() == samplers[0].state_dict() for s in samplers)  # same on all ranks


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    w=st.integers(1, 6),
    w2=st.integers(1, 6),
    epoch=st.integers(0, 9),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_seek_equals_iterating_and_elastic_resume(n, w, w2, epoch, drop_last, data) -> None:
    """Stop after k steps on W ranks, resume on W' ranks: the global stream continues."""
    first = ranks(n, w, seed=9, drop_last=drop_last)
    steps = len(first[0])
    k = data.draw(st.integers(0, steps))
    for s in first:
        s.set_epoch(epoch)
        it = iter(s)
        for _ in range(k):
            next(it)
    state = json.loads(json.dumps(first[0].state_dict()))
    assert all(s.state_dict() == state for s in first)
    second = ranks(n, w2, seed=9, drop_last=drop_last)
    rest = []
    for s in second:
        s.load_state_dict(state)
        s.set_epoch(epoch)  # a resumed script calls set_epoch: it must not rewind
        rest.append(list(s))
    assert len({len(r) for r in rest}) == 1
    flat = [i for r in rest for i in r]
    full_global = first[0].indices(epoch, range(n)).tolist()
    done = state["position"]
    if w2 == w:  # same world size: exactly the uninterrupted stream
        uninterrupted = ranks(n, w, seed=9, drop_last=drop_last)
        for s, got in zip(uninterrupted, rest, strict=True):
            s.set_epoch(epoch)
            assert list(s)[k:] == got
    if done < n:
        remaining = full_global[done:]
        if drop_last:
            keep = (len(remaining) // w2) * w2
            assert sorted(flat) == sorted(remaining[:keep])
        else:
            # fewer than W' padding samples: on the same world size torch's (the epoch's head,
            # as the uninterrupted run), on another the head of the rest: nothing consumed
            pad = len(flat) - len(remaining)
            assert 0 <= pad < w2
            pool = full_global if w2 == w else remaining
            head = [pool[j % len(pool)] for j in range(pad)]
            assert sorted(flat) == sorted(remaining + head)
            if w2 != w:
                assert not set(flat) & set(full_global[:done])  # nothing consumed reappears
    else:
        assert flat == []


def test_set_epoch_moves_and_keeps() -> None:
    s = DistributedSampler(Sized(10), 1, 0, seed=1)
    s.set_epoch(3)
    assert (s.epoch, s.position) == (3, 0)
    it = iter(s)
    next(it), next(it)
    assert s.position == 2
    state = s.state_dict()
    t = DistributedSampler(Sized(10), 1, 0, seed=1)
    t.load_state_dict(state)
    t.set_epoch(3)  # same epoch: keeps position 2
    assert list(t) == list(it)
    t.set_epoch(4)
    assert (t.epoch, t.position) == (4, 0)


def _run_to_end(s: DistributedSampler, epoch: int) -> list[int]:
    s.set_epoch(epoch)
    out = list(s)
    assert (s.epoch, s.position) == (epoch, s.n)
    return out


@pytest.mark.parametrize("w", [1, 3])
def test_epoch_end_rules_after_resume_at_the_end(w: int) -> None:
    n = 10
    src = ranks(n, w, seed=2)
    for s in src:
        _run_to_end(s, 4)
    state = src[0].state_dict()
    assert state["epoch"] == 4 and state["position"] == n

    # 1) set_epoch(e) at the end keeps it: the rest of epoch e is empty
    for s in ranks(n, w, seed=2):
        s.load_state_dict(state)
        s.set_epoch(4)
        assert list(s) == []
    # 2) set_epoch(e + 1) starts the next epoch
    for r, s in enumerate(ranks(n, w, seed=2)):
        s.load_state_dict(state)
        s.set_epoch(5)
        ref = ranks(n, w, seed=2)[r]
        ref.set_epoch(5)
        assert list(s) == list(ref)
    # 3) iter() with no set_epoch since the end rolls over to (e + 1, 0)
    for r, s in enumerate(ranks(n, w, seed=2)):
        s.load_state_dict(state)
        got = list(s)
        ref = ranks(n, w, seed=2)[r]
        ref.set_epoch(5)
        assert got == list(ref) and s.epoch == 5


def test_plain_loop_reshuffles_each_epoch_like_torch() -> None:
    s = DistributedSampler(Sized(50), 1, 0, seed=0)
    epochs = [list(s) for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    assert [sorted(e) for e in epochs] == [list(range(50))] * 3
    assert s.epoch == 2


def test_end_of_epoch_with_drop_last_is_the_same_cursor_for_any_world_size() -> None:
    src = ranks(10, 4, seed=0, drop_last=True)
    for s in src:
        assert len(_run_to_end(s, 0)) == 2
    state = src[0].state_dict()
    for s in ranks(10, 2, seed=0, drop_last=True):  # W' = 2 must not pick up the dropped tail
        s.load_state_dict(state)
        s.set_epoch(0)
        assert list(s) == []


def test_state_is_json_and_weights_only_loadable() -> None:
    s = DistributedSampler(Sized(100), 4, 1, seed=5)
    s.set_epoch(2)
    it = iter(s)
    next(it)
    state = s.state_dict()
    assert json.loads(json.dumps(state)) == state
    buf = io.BytesIO()
    torch.save({"sampler": state}, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["sampler"] == state
    assert state["position"] == 4 and state["epoch"] == 2 and state["n"] == 100
    assert len(json.dumps(state)) < 512


@pytest.mark.parametrize(
    "field, value, kw",
    [
        ("n", 99, {}),
        ("seed", 6, {}),
        ("order", "torch", {}),
        ("shuffle", False, {}),
        ("drop_last", True, {}),
    ],
)
def test_mismatch_names_field_both_values_and_fix(field, value, kw) -> None:
    state = DistributedSampler(Sized(100), 1, 0, seed=5).state_dict()
    state[field] = value
    s = DistributedSampler(Sized(100), 1, 0, seed=5)
    with pytest.raises(seekdata.StateMismatchError, match=rf"{field} is .* in the checkpoint but"):
        s.load_state_dict(state)
    with pytest.warns(UserWarning, match="strict=False"):
        s.load_state_dict(state, strict=False)


@pytest.mark.parametrize(
    "state, match",
    [
        ({}, "state is empty"),
        ([], "state must be a dict"),
        ({"epoch": 0}, "no 'seekdata' version key"),
        ({"seekdata": 99, "kind": "sampler", "epoch": 0, "position": 0}, "format version 99"),
        ({"seekdata": 1, "kind": "sampler", "epoch": 0}, "missing 'position'"),
        (
            {
                "seekdata": 1,
                "kind": "sampler",
                "epoch": "0",
                "position": 0,
                "exhausted": False,
                "n": 10,
                "seed": 0,
                "order": "feistel",
                "shuffle": True,
                "drop_last": False,
                "world_size": 1,
            },
            r"state\['epoch'\] must be int",
        ),
    ],
)
def test_bad_states_are_rejected_clearly(state, match) -> None:
    s = DistributedSampler(Sized(10), 1, 0)
    before = s.state_dict()
    with pytest.raises((TypeError, ValueError), match=match):
        s.load_state_dict(state)
    assert s.state_dict() == before  # bad input loses nothing


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(dataset=Sized(0)), ValueError, "at least 1 sample"),
        (dict(dataset=iter([])), TypeError, "must have a length"),
        (dict(num_replicas=0, rank=0), ValueError, "num_replicas must be >= 1"),
        (dict(num_replicas=2, rank=2), ValueError, "rank must be in"),
        (dict(num_replicas=2, rank=-1), ValueError, "rank must be in"),
        (dict(num_replicas=2.0, rank=0), TypeError, "num_replicas must be an int"),
        (dict(seed=-1), ValueError, "seed must be a non-negative int"),
        (dict(seed="1"), TypeError, "seed must be a non-negative int"),
        (dict(order="nope"), ValueError, "order must be one of"),
        (dict(shuffle="yes"), TypeError, "shuffle must be a bool"),
    ],
)
def test_bad_arguments(kwargs, error, match) -> None:
    kw = dict(dataset=Sized(10), num_replicas=1, rank=0)
    kw.update(kwargs)
    with pytest.raises(error, match=match):
        DistributedSampler(**kw)


def test_bad_epochs_and_seek() -> None:
    s = DistributedSampler(Sized(10), 1, 0)
    for bad, error in [(-1, ValueError), (1.0, TypeError), (None, TypeError)]:
        with pytest.raises(error, match="epoch must be a non-negative int"):
            s.set_epoch(bad)
    with pytest.raises(ValueError, match=r"position must be in \[0, 10\]"):
        s.seek(11)
    s.seek(7, epoch=2)
    assert (s.epoch, s.position, len(list(s))) == (2, 7, 3)


def test_world_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    s = DistributedSampler(Sized(10))
    assert (s.num_replicas, s.rank) == (4, 2)
    monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match="rank is unknown while the world size is 4"):
        DistributedSampler(Sized(10))
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert DistributedSampler(Sized(10)).rank == 0


def test_state_saved_after_last_sample_but_before_the_iterator_finished() -> None:
    """A loop that checkpoints every step saves (e, n) before StopIteration: the resumed
    loop must first finish epoch e (empty), then roll over, like the uninterrupted loop."""
    n, epochs = 12, 3
    ref = DistributedSampler(Sized(n), 1, 0, seed=4)
    uninterrupted = [list(ref) for _ in range(epochs)]

    s = DistributedSampler(Sized(n), 1, 0, seed=4)
    it = iter(s)
    first = [next(it) for _ in range(n)]  # the last sample of epoch 0 is consumed...
    state = s.state_dict()  # ...and the checkpoint is written before StopIteration
    assert state["position"] == n and state["exhausted"] is False

    resumed = DistributedSampler(Sized(n), 1, 0, seed=4)
    resumed.load_state_dict(state)
    rest = [list(resumed) for _ in range(epochs)]  # the script's loop resumes at epoch 0
    assert [first + rest[0], *rest[1:]] == uninterrupted

    after = DistributedSampler(Sized(n), 1, 0, seed=4)
    list(after)  # the loop finished: a checkpoint now says exhausted
    assert after.state_dict()["exhausted"] is True


# -- a Hugging Face dataset already split by node ------------------------------------------------


def _hf_split(n: int) -> object:
    """A ``datasets.Dataset`` of split 'train' with n examples, recorded in its info as
    ``load_dataset`` records it."""
    datasets = pytest.importorskip("datasets")
    splits = datasets.SplitDict()
    splits.add(datasets.SplitInfo(name="train", num_examples=n))
    info = datasets.DatasetInfo(splits=splits)
    return datasets.Dataset.from_dict({"x": list(range(n))}, info=info, split="train")


@pytest.mark.parametrize(("n", "world", "rank"), [(100, 4, 1), (101, 3, 0), (101, 3, 2)])
def test_a_dataset_split_by_node_and_sampled_again_warns(n: int, world: int, rank: int) -> None:
    whole = _hf_split(n)
    from datasets.distributed import split_dataset_by_node

    part = split_dataset_by_node(whole, rank=rank, world_size=world)
    with pytest.warns(UserWarning, match="must be the whole split") as caught:
        sampler = DistributedSampler(part, num_replicas=world, rank=rank)
    message = str(caught[0].message)
    assert f"got {len(part)} of the {n} examples of split 'train'" in message
    assert f"only 1/{world} of the split per epoch" in message
    assert "pass the unsplit dataset" in message and caught[0].filename == __file__
    assert len(sampler) == -(-len(part) // world)  # what it warns about: a part of a part
    with pytest.warns(UserWarning, match="must be the whole split"):
        DistributedSampler(part, num_replicas=1, rank=0).reshard(world, rank)


def test_a_whole_or_otherwise_cut_dataset_does_not_warn() -> None:
    """pytest turns warnings into errors here: none of these may warn."""
    whole = _hf_split(100)
    from datasets.distributed import split_dataset_by_node

    for rank in range(4):
        DistributedSampler(whole, num_replicas=4, rank=rank)  # the right way
    part = split_dataset_by_node(whole, rank=1, world_size=4)
    DistributedSampler(part, num_replicas=1, rank=0)  # split by node alone
    DistributedSampler(whole.select(range(60)), num_replicas=4, rank=0)  # a subset, not a part
    DistributedSampler(list(range(25)), num_replicas=4, rank=0)  # not a datasets.Dataset
