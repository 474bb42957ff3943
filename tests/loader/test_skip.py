"""Skip and rewind in O(1): move the cursor by k global batches, or skip listed global steps."""

from __future__ import annotations

import json

import pytest
import torch

import seekdata
from seekdata import StateMismatchError
from tests.helpers.datasets import GlobalRNGAug, batches_equal

N, B = 10, 3  # 4 batches per epoch, the last one short


def shifted(batch: dict, gen) -> dict:  # batch-level randomness, keyed by (epoch, step)
    return {**batch, "mix": torch.tensor(gen.random())}


def make(**kw) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(
        GlobalRNGAug(N), batch_size=B, shuffle=True, seed=7, batch_transform=shifted, **kw
    )


def take(loader, m: int) -> list:
    """The next ``m`` batches (or indices of a sampler), across epoch ends, as a plain epoch
    loop would see them."""
    out: list = []
    while len(out) < m:
        for batch in loader:
            out.append(batch)
            if len(out) == m:
                break
    return out


STREAM = take(make(), 28)  # 7 epochs, uninterrupted


@pytest.mark.parametrize("done", [0, 1, 3, 4, 5, 8])
@pytest.mark.parametrize("k", [-5, -4, -1, 1, 2, 4, 7])
def test_skip_moves_by_k_global_batches_within_and_across_epochs(done, k) -> None:
    if done + k < 0:
        loader = make()
        take(loader, done)
        with pytest.raises(ValueError, match="before the first batch of epoch 0"):
            loader.skip(k)
        return
    loader = make()
    head = take(loader, done)
    assert batches_equal(head, STREAM[:done])
    loader.skip(k)
    state = json.loads(json.dumps(loader.state_dict()))
    rest = take(loader, 6)
    assert batches_equal(rest, STREAM[done + k : done + k + 6])
    resumed = make()
    resumed.load_state_dict(state)  # the move is in the state: a resume does not undo it
    assert batches_equal(take(resumed, 6), STREAM[done + k : done + k + 6])


def test_skip_after_the_epochs_iterator_finished_counts_from_the_next_epoch() -> None:
    loader = make()
    assert batches_equal(list(loader), STREAM[:4])  # the iterator finished: exhausted
    loader.skip(1)
    assert batches_equal(take(loader, 3), STREAM[5:8])


@pytest.mark.parametrize("start, stop", [(1, 2), (2, 4), (3, 6), (4, 8), (5, 13), (0, 1), (0, 4)])
@pytest.mark.parametrize("saved_at", [None, 0, 1, 2, 5])
def test_skip_steps_jumps_the_listed_global_steps_and_the_state_keeps_it(
    start, stop, saved_at
) -> None:
    expected = STREAM[:start] + STREAM[stop:]
    loader = make()
    loader.skip_steps(start, stop)
    if saved_at is None:
        assert batches_equal(take(loader, 10), expected[:10])
        return
    head = take(loader, saved_at)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["skips"] == [[start, stop]]
    resumed = make()
    resumed.load_state_dict(state)
    assert batches_equal(head + take(resumed, 10 - saved_at), expected[:10])


def test_skip_ranges_merge_and_a_rewind_lands_before_them() -> None:
    loader = make()
    loader.skip_steps(6, 8)
    loader.skip_steps(2, 3)
    loader.skip_steps(7, 9)
    assert loader.state_dict()["skips"] == [[2, 3], [6, 9]]
    expected = STREAM[:2] + STREAM[3:6] + STREAM[9:]
    assert batches_equal(take(loader, 5), expected[:5])
    # after steps 0, 1, 3, 4, 5 the cursor jumped the hole to the end of epoch 1 (global step
    # 8): a move counts global steps, skipped ones included, and the skips stay
    loader.skip(-3)
    assert batches_equal(take(loader, 4), [STREAM[5], *STREAM[9:12]])


def test_moving_the_cursor_stops_a_live_iterator() -> None:
    loader = make()
    it = iter(loader)
    next(it)
    loader.skip(2)
    with pytest.raises(RuntimeError, match="call iter"):
        next(it)


def test_skips_apply_to_every_rank_alike() -> None:
    """Two ranks skip the same global batches: each step's global batch is the uninterrupted
    run's (rank r of W takes every W-th position of the global stream)."""

    def ranks(skip: bool) -> list[list]:
        out = []
        for rank in range(2):
            sampler = seekdata.DistributedSampler(GlobalRNGAug(N), 2, rank, seed=7)
            loader = seekdata.StatefulDataLoader(
                GlobalRNGAug(N), batch_size=2, sampler=sampler, seed=7
            )
            if skip:
                loader.skip_steps(1, 2)
            out.append([b["index"].tolist() for b in take(loader, 5)])
        return out

    full, skipped = ranks(False), ranks(True)
    for rank in range(2):
        assert skipped[rank] == full[rank][:1] + full[rank][2:5] + skipped[rank][4:]
    assert skipped[0][3] == full[0][4] and skipped[1][3] == full[1][4]


def test_paths_that_cannot_seek_refuse_to_move() -> None:
    replay = seekdata.StatefulDataLoader(
        GlobalRNGAug(N), batch_size=B, sampler=torch.utils.data.SequentialSampler(range(N))
    )
    for move in (lambda: replay.skip(1), lambda: replay.skip_steps(0, 1)):
        with pytest.raises(ValueError, match="needs a seekable sampler"):
            move()

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield from range(4)

    iterable = seekdata.StatefulDataLoader(Stream(), batch_size=2)
    with pytest.raises(ValueError, match="IterableDataset decides its own order"):
        iterable.skip_steps(0, 1)


@pytest.mark.parametrize(
    "skips", [[[3, 2]], [[1, 2], [2, 4]], [[-1, 2]], [[1, 2, 3]], "1-2", [[True, 2]]]
)
def test_a_bad_skip_list_in_a_state_is_refused(skips) -> None:
    state = make().state_dict()
    state["skips"] = skips
    with pytest.raises(StateMismatchError, match="skips"):
        make().load_state_dict(state)


def test_bad_arguments() -> None:
    loader = make()
    with pytest.raises(ValueError, match="must not be empty"):
        loader.skip_steps(3, 3)
    with pytest.raises(ValueError, match="int >= 0"):
        loader.skip_steps(-1, 3)
    with pytest.raises(TypeError, match="must be an int"):
        loader.skip(1.5)


def test_the_sampler_moves_by_global_batches_too() -> None:
    full = take(seekdata.DistributedSampler(range(N), 2, 1, seed=3), 30)  # 5 per epoch
    sampler = seekdata.DistributedSampler(range(N), 2, 1, seed=3)
    head = take(sampler, 4)  # two batches of 2 on this rank
    sampler.skip(3, batch_size=2)  # epoch 0 has ceil(5 / 2) = 3 batches: to epoch 1, batch 2
    assert head + take(sampler, 6) == full[:4] + full[9:15]
    # at the end of epoch 2 (global batch 9); back 4: epoch 1, batch 2 (its short last one)
    sampler.skip(-4, batch_size=2)
    assert take(sampler, 3) == full[9:12]


def test_the_batch_sampler_view_leaves_out_skipped_steps() -> None:
    """loader.batch_sampler (torch's view, iterated by frameworks) lists the batches the loader
    will hand out: skipped steps are gone from it too, and iterating it moves nothing."""
    loader = make()
    take(loader, 1)  # mid-epoch 0, step 1
    loader.skip_steps(2, 3)  # epoch 0's third batch
    loader.skip_steps(5, 6)  # epoch 1's second batch
    view = [list(b) for b in loader.batch_sampler]
    got = [batch["index"].tolist() for batch in loader]
    assert view == got and len(got) == 2  # steps 1 and 3 of epoch 0
    view = [list(b) for b in loader.batch_sampler]  # the next epoch, its step 1 skipped
    got = [batch["index"].tolist() for batch in loader]
    assert view == got and len(got) == 3
    assert len(loader.batch_sampler) == 4  # torch's len: a full epoch


def _ranked(world: int, batch_size: int = 4, n: int = 48) -> seekdata.StatefulDataLoader:
    sampler = seekdata.DistributedSampler(range(n), num_replicas=world, rank=0, seed=3)
    return seekdata.StatefulDataLoader(list(range(n)), batch_size=batch_size, sampler=sampler)


@pytest.mark.parametrize("done", [3, 4])  # 12 positions: mid-batch on 2 ranks; 16: on a batch
@pytest.mark.parametrize("k", [1, 2, 4, -1, 8])
def test_skip_after_a_resume_on_another_world_size_moves_like_consuming(done, k) -> None:
    """skip(k) is what consuming k batches does, also after an elastic resume (1 rank -> 2,
    the same per-rank batch): the loader used to count from its restored batch number (kept
    from the old world size, so it jumped too far), the sampler from the position on a grid
    from 0 (which moved a mid-batch cursor by part of a batch). One rule now serves both."""
    first = _ranked(1)
    it = iter(first)
    for _ in range(done):
        next(it)
    state = first.state_dict()

    def resumed() -> seekdata.StatefulDataLoader:
        loader = _ranked(2)
        loader.load_state_dict(state)
        return loader

    def ahead(loader: seekdata.StatefulDataLoader, m: int) -> list:
        return [batch.tolist() for batch in take(loader, m)]

    stream = ahead(resumed(), 12)  # the resumed run, consumed batch by batch, across epochs
    moved = resumed()
    moved.skip(k)
    if k > 0:
        assert ahead(moved, 3) == stream[k : k + 3]
    else:  # back: the epoch's batches before the position, on the position's own grid
        there = resumed()
        there.skip(2)
        there.skip(k)
        assert ahead(there, 3) == stream[2 + k : 5 + k]


def test_the_sampler_moves_a_mid_batch_cursor_by_whole_batches() -> None:
    sampler = seekdata.DistributedSampler(range(48), num_replicas=2, rank=0, seed=3)
    full = list(sampler)  # positions 0, 2, 4, ... of the epoch
    sampler.seek(12)  # a cursor that a resume from 1 rank left mid-batch for 2 ranks of 4
    sampler.skip(1, batch_size=4)
    assert list(sampler) == full[10:]  # position 20 on: one global batch (8) further
    sampler.seek(12)
    sampler.skip(-1, batch_size=4)
    assert list(sampler) == full[2:]  # position 4
