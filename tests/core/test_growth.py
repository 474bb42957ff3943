"""A dataset that grew between a checkpoint and the resume: declared, and then exact.

The new items join the epoch where the dataset grew: nothing consumed comes back, no old item
is lost, every new item is served once in that epoch, and every checkpoint — saved before the
growth (with the growth declared) or after it (which records it) — resumes into the same stream.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seekdata
from seekdata import Growth, StateMismatchError
from seekdata._core.growth import GrownOrder
from seekdata.order import make_order

N0, N1, B = 20, 29, 3


def make(n: int, **kw) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(list(range(n)), batch_size=B, shuffle=True, seed=4, **kw)


def flat(batches) -> list[int]:
    return [x for batch in batches for x in batch.tolist()]


def as_json(state: dict) -> dict:
    return json.loads(json.dumps(state))


def grown_run(k: int, epochs: int = 3, num_workers: int = 0) -> tuple[list[list[int]], dict]:
    """Batches of a run that stops after k batches on N0 items, resumes with grow=True on N1
    and runs to the end of ``epochs`` epochs; and the state it grew at."""
    first = make(N0)
    it = iter(first)
    head = [next(it).tolist() for _ in range(k)]
    state = as_json(first.state_dict())
    loader = make(N1, num_workers=num_workers)
    loader.load_state_dict(state, grow=True)
    out = head + [b.tolist() for b in loader]
    for _ in range(epochs - 1):
        out += [b.tolist() for b in loader]
    return out, state


@pytest.mark.parametrize("k", range(8))  # 7 batches an epoch on N0: every step, and its end
def test_the_growth_epoch_serves_every_item_once_and_later_epochs_are_whole(k: int) -> None:
    out, _ = grown_run(k)
    items = [x for batch in out for x in batch]
    first = items[: k * B] if k < 7 else items[:N0]
    growth_epoch = items[: k * B + (N1 - k * B)] if k < 7 else items[:N0]
    assert sorted(growth_epoch) == (list(range(N1)) if k < 7 else list(range(N0)))
    assert items[: len(first)] == first
    rest = items[len(growth_epoch) :]
    for e in range(0, len(rest), N1):  # each later epoch: the grown dataset, once
        assert sorted(rest[e : e + N1]) == list(range(N1))


@pytest.mark.parametrize("k", [0, 2, 5])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_checkpoint_after_the_growth_resumes_exactly(k: int, num_workers: int) -> None:
    out, _ = grown_run(k)
    loader = make(N1)
    first = make(N0)
    it = iter(first)
    for _ in range(k):
        next(it)
    loader.load_state_dict(as_json(first.state_dict()), grow=True)
    done = k
    for stop in (k + 2, k + 5, k + 11):  # save after more batches (across the epoch's end)
        while done < stop:
            it = iter(loader)
            for batch in it:
                assert batch.tolist() == out[done]
                done += 1
                if done == stop:
                    break
        state = as_json(loader.state_dict())
        assert state["n"] == N1 and state["grown"][0][2] == N0
        loader = make(N1, num_workers=num_workers)  # adopts the recorded growth: none declared
        loader.load_state_dict(state)
    rest = flat(loader) + flat(loader)
    assert rest == [x for batch in out[done:] for x in batch][: len(rest)]


@pytest.mark.parametrize("saved_at", [0, 1, 2])
def test_a_checkpoint_from_before_the_growth_resumes_into_the_same_stream(saved_at: int) -> None:
    out, state = grown_run(3)
    growth = Growth(state["epoch"], state["position"], state["n"])
    first = make(N0)
    it = iter(first)
    for _ in range(saved_at):
        next(it)
    loader = make(N1, grown=[growth])
    loader.load_state_dict(as_json(first.state_dict()))
    got = [b.tolist() for b in loader] + [b.tolist() for b in loader]
    assert got == out[saved_at : saved_at + len(got)]


def test_a_growth_at_an_epochs_end_joins_the_next_epoch() -> None:
    first = make(N0)
    list(first)
    state = as_json(first.state_dict())
    loader = make(N1)
    loader.load_state_dict(state, grow=True)
    assert loader.state_dict()["grown"] == [[1, 0, N0]]
    assert sorted(flat(loader)) == list(range(N1))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ranks_cover_the_grown_epoch_and_pad_from_where_it_grew(k: int) -> None:
    """Two ranks, 1 sample a batch: the growth epoch's rest is re-partitioned from the growth
    position, so its padding repeats only items of the rest, never one consumed before."""

    def ranks(n: int, **kw) -> list[seekdata.StatefulDataLoader]:
        return [
            seekdata.StatefulDataLoader(
                list(range(n)),
                sampler=seekdata.DistributedSampler(range(n), 2, r, seed=1, **kw),
                batch_size=1,
            )
            for r in range(2)
        ]

    old = ranks(N0)
    heads = []
    for loader in old:
        it = iter(loader)
        heads.append([next(it).item() for _ in range(k)])
    state = as_json(old[0].state_dict())
    new = ranks(N1)
    for loader in new:
        loader.load_state_dict(state, grow=True)
    rests = [flat(loader) for loader in new]
    consumed = set(heads[0] + heads[1])
    served = rests[0] + rests[1]
    assert set(served) == set(range(N1)) - consumed  # every other item, old or new
    assert len(served) == len(set(served)) + (len(served) - (N1 - 2 * k))  # padding only
    assert not consumed & set(served)


def test_the_sampler_grows_too() -> None:
    sampler = seekdata.DistributedSampler(range(N0), 1, 0, seed=2)
    it = iter(sampler)
    head = [next(it) for _ in range(7)]
    grown = seekdata.DistributedSampler(range(N1), 1, 0, seed=2)
    grown.load_state_dict(as_json(sampler.state_dict()), grow=True)
    assert sorted(head + list(grown)) == list(range(N1))
    assert grown.state_dict()["grown"] == [[0, 7, N0]]


class _Sharded(list):
    """A dataset read shard by shard: ``shard_sizes`` as TarShards has them."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__(range(sum(sizes)))
        self.shard_sizes = sizes


def test_a_sharded_dataset_grows_by_whole_shards() -> None:
    old, new = _Sharded([5, 5, 5]), _Sharded([5, 5, 5, 5, 4])

    def loader(ds):
        sampler = seekdata.DistributedSampler(ds, 1, 0, seed=3, order="shards")
        return seekdata.StatefulDataLoader(ds, sampler=sampler, batch_size=2)

    first = loader(old)
    it = iter(first)
    head = [next(it).tolist() for _ in range(3)]
    state = as_json(first.state_dict())
    grown = loader(new)
    grown.load_state_dict(state, grow=True)
    rest = flat(grown)
    assert sorted([x for b in head for x in b] + rest) == list(range(24))
    assert rest[-9:] == list(range(15, 24))  # the new shards, read in order, after the rest
    with pytest.raises(ValueError, match="grows by whole shards"):
        seekdata.DistributedSampler(new, 1, 0, seed=3, order="shards", grown=[Growth(0, 6, 12)])


def test_refusals_name_the_fix() -> None:
    first = make(N0)
    it = iter(first)
    next(it)
    state = as_json(first.state_dict())
    with pytest.raises(StateMismatchError, match="n is 20 in the checkpoint but 29 here"):
        make(N1).load_state_dict(state)
    with pytest.raises(ValueError, match="had 20 items then and has 20 now"):
        make(N0).load_state_dict(state, grow=True)
    with pytest.raises(ValueError, match=r"pass grown= to seekdata\.DistributedSampler"):
        sampler = seekdata.DistributedSampler(range(N1), 1, 0)
        seekdata.StatefulDataLoader(list(range(N1)), sampler=sampler, grown=[Growth(0, 3, N0)])
    with pytest.raises(ValueError, match="lengths before each growth"):
        make(N1, grown=[Growth(0, 3, N1)])
    with pytest.raises(TypeError, match=r"list of seekdata\.Growth"):
        make(N1, grown=Growth(0, 3, N0))
    later = make(N1, grown=[Growth(2, 0, N0)])  # a checkpoint of epoch 0: before that epoch
    with pytest.raises(StateMismatchError, match="before the epoch of the growth"):
        later.load_state_dict(state)
    grown = make(N1)
    grown.load_state_dict(state, grow=True)
    recorded = as_json(grown.state_dict())
    other = make(N1, grown=[Growth(0, 6, N0)])  # declares another growth than it records
    with pytest.raises(StateMismatchError, match="pass grown= with the checkpoint's growths"):
        other.load_state_dict(recorded)
    ended = make(N0)
    list(ended)
    at_end = make(N1)
    at_end.load_state_dict(as_json(ended.state_dict()), grow=True)  # grew at epoch 1's start
    with pytest.raises(ValueError, match="before the dataset grew"):
        at_end.skip(-1)  # back into epoch 0, cut over 20 items
    kept = make(N1)
    it = iter(kept)
    next(it)
    before = kept.state_dict()
    with pytest.raises(StateMismatchError):
        kept.load_state_dict({**recorded, "grown": [[0, "x", N0]]})
    assert kept.state_dict() == before  # a refused state changes nothing


@settings(max_examples=60, deadline=None)
@given(
    n0=st.integers(1, 60),
    extra=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 100), min_size=3, max_size=3),
    same_epoch=st.booleans(),
    kind=st.sampled_from(["feistel", "torch", "sequential"]),
)
def test_a_growth_epoch_is_a_permutation_keeping_what_was_consumed(
    n0, extra, cuts, same_epoch, kind
) -> None:
    sizes = [n0]
    for e in extra:
        sizes.append(sizes[-1] + e)
    n = sizes[-1]
    growths = tuple(
        Growth(0 if same_epoch else i, min(c, sizes[i]) if not same_epoch else 0, sizes[i])
        for i, c in enumerate(cuts[: len(extra)])
    )
    if same_epoch:  # growths in one epoch, at increasing positions, each before its end
        at = sorted(min(c, s - 1) for c, s in zip(cuts, sizes[:-1], strict=False))
        growths = tuple(Growth(0, p, s) for p, s in zip(at, sizes[:-1], strict=False))
    growths = seekdata._core.growth.check_growths(list(growths), n, "test")

    def over(size: int):
        return make_order(kind, size, 9, shuffle=kind != "sequential")

    order = GrownOrder(over, growths, n, 9, kind != "sequential")
    last = growths[-1]  # the epochs a run reaches over n items: the last growth's, and later
    epoch_items = order.indices(last.epoch, np.arange(n)).tolist()
    assert sorted(epoch_items) == list(range(n))
    r = min(last.position, last.length)
    earlier = growths[:-1]  # the order just before the last growth: the same growths before it
    before = GrownOrder(over, earlier, last.length, 9, kind != "sequential") if earlier else None
    before = before or over(last.length)
    plain = before.indices(last.epoch, np.arange(r)).tolist()
    assert epoch_items[:r] == plain  # what was consumed before the growth stays
    later = order.indices(growths[-1].epoch + 1, np.arange(n)).tolist()
    assert later == over(n).indices(growths[-1].epoch + 1, np.arange(n)).tolist()


def test_inspect_prints_the_growth_to_declare(tmp_path) -> None:
    from seekdata.tools import inspection

    _, state = grown_run(2, epochs=1)
    loader = make(N1)
    loader.load_state_dict(state, grow=True)
    described = inspection.describe((), as_json(loader.state_dict()))
    assert described["grown"] == [[0, 6, N0]]
    assert "seekdata.Growth(0, 6, 20)" in inspection.format_state(described)


# --- what can grow: declared, and checked (issue 27) -------------------------------------------


def _corpus(tmp_path, count: int = 4):
    """``count`` token files of different sizes (documents ending with EOS), in order."""
    from tests.sources.tokens.test_tokens import documents, write

    lengths = [5, 9, 3, 12, 7, 4, 11, 6, 8, 10, 5, 13][: 3 * count]
    return write(tmp_path, documents(lengths), [3 * k for k in range(1, count)])


def _loader(ds, **kw) -> seekdata.StatefulDataLoader:
    shuffle = not isinstance(ds, seekdata.Mixture)  # a mixture orders itself
    return seekdata.StatefulDataLoader(ds, batch_size=2, shuffle=shuffle, seed=4, **kw)


def _saved(ds, steps: int = 2) -> tuple[seekdata.StatefulDataLoader, dict]:
    loader = _loader(ds)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    return loader, as_json(loader.state_dict())


def _refused(loader, state: dict, match: str, **kw) -> StateMismatchError:
    """``loader.load_state_dict(state, **kw)`` raises, and leaves the loader as it was."""
    before = loader.state_dict()
    with pytest.raises(StateMismatchError, match=match) as e:
        loader.load_state_dict(state, **kw)
    assert loader.state_dict() == before
    return e.value


def test_packed_documents_never_grow(tmp_path) -> None:
    """Appending documents re-packs the last packing block: refused on every path."""
    from seekdata.tokens import PackedDocuments

    files = _corpus(tmp_path)
    old, new = PackedDocuments(files[:3], 8, eos_id=1), PackedDocuments(files, 8, eos_id=1)
    assert len(new) > len(old)
    why = r"cannot grow: it declares append_stable = False.* re-packs the last block"
    _, state = _saved(old)
    _refused(_loader(new), state, why, grow=True)
    sampler = seekdata.DistributedSampler(old, 1, 0, seed=4)
    sampler.set_epoch(0)
    next(iter(sampler))
    grown = seekdata.DistributedSampler(new, 1, 0, seed=4)
    _refused(grown, as_json(sampler.state_dict()), why, grow=True)
    with pytest.raises(StateMismatchError, match=why):
        seekdata.DistributedSampler(new, 1, 0, grown=[Growth(0, 2, len(old))])
    with pytest.raises(StateMismatchError, match=why):
        _loader(new, grown=[Growth(0, 2, len(old))])
    mix = seekdata.Mixture({"pd": old, "more": range(10)}, [1, 1], seed=2)
    with pytest.raises(StateMismatchError, match=rf"grown source 'pd' \(PackedDocuments\) {why}"):
        mix.changed(4, [1, 1], grown={"pd": new})


def test_token_windows_grow_by_appended_files_and_nothing_else(tmp_path) -> None:
    """Files appended after the old ones: every old window kept, the growth exact. The old
    files in another order: refused, though TokenWindows declares append_stable = True."""
    from seekdata.tokens import TokenWindows

    files = _corpus(tmp_path)
    old, new = TokenWindows(files[:3], 4), TokenWindows(files, 4)
    assert new.signature_of_first(len(old)) == old.stream_signature
    _, state = _saved(old, 3)
    replay = iter(_loader(old))  # what the run served before it grew
    served = [tuple(x) for _ in range(3) for x in next(replay)["input_ids"].tolist()]
    grown = _loader(new)
    grown.load_state_dict(state, grow=True)
    rest = [tuple(x) for b in grown for x in b["input_ids"].tolist()]
    windows = [tuple(new[i]["input_ids"].tolist()) for i in range(len(new))]
    assert sorted([*served, *rest]) == sorted(windows)  # every window of the grown corpus once
    assert grown.state_dict()["dataset"] == new.stream_signature

    swapped = TokenWindows([files[1], files[0], files[2], files[3]], 4)
    assert len(swapped) == len(new)
    e = _refused(_loader(swapped), state, r"first 16 items: it grew since", grow=True)
    assert "the same data in the same order" in str(e)
    assert "the same sources, weights and seed" not in str(e)
    mix = seekdata.Mixture({"tw": old, "more": range(10)}, [1, 1], seed=2)
    mix.changed(4, [1, 1], grown={"tw": new})  # appended: accepted
    with pytest.raises(StateMismatchError, match=r"'tw' did not grow append-only"):
        mix.changed(4, [1, 1], grown={"tw": swapped})


def test_the_length_refusal_names_grow_and_a_mixture_names_changed() -> None:
    """A longer dataset without grow=True: the message names grow=True. grow=True on a
    Mixture: the message names mix.changed(..., grown=), not grow=False."""
    _, state = _saved(list(range(N0)))
    e = _refused(_loader(list(range(N1))), state, "n is 20 in the checkpoint but 29 here")
    assert "load_state_dict(state, grow=True)" in str(e)
    mix = seekdata.Mixture({"a": range(6), "b": range(4)}, [1, 1], length=10, seed=1)
    _, state = _saved(mix)
    grown = seekdata.Mixture({"a": range(8), "b": range(4)}, [1, 1], length=10, seed=1)
    e = _refused(_loader(grown), state, r"Mixture\) cannot grow", grow=True)
    assert "mix.changed(state, weights, grown={name: grown_source})" in str(e)
    assert "grow=False" not in str(e)
