"""The Cursor alone applies the epoch-end rules; every engine and the sampler share it."""

from __future__ import annotations

import pytest

import seekdata
from seekdata._core.cursor import Cursor


def test_begin_rolls_over_only_after_the_iterator_finished_and_no_set_epoch() -> None:
    c = Cursor(10)
    c.advance(10, 3)
    assert not c.begin()  # at the end, but the iterator never finished: the empty rest first
    assert (c.epoch, c.position) == (0, 10)
    c.finish()
    assert c.next_start() == (1, 0)
    assert (c.epoch, c.position) == (0, 10)  # next_start moves nothing
    assert c.begin()
    assert (c.epoch, c.position, c.batch, c.exhausted) == (1, 0, 0, False)


def test_an_explicit_set_epoch_at_the_end_keeps_the_epoch_empty() -> None:
    c = Cursor(10)
    c.finish()
    assert not c.set_epoch(0, "t")  # the same epoch: the position stays (at the end)
    assert not c.begin()
    assert (c.epoch, c.position) == (0, 10)
    c.finish()
    assert c.set_epoch(1, "t")
    assert (c.epoch, c.position, c.exhausted) == (1, 0, False)


def test_set_epoch_keeps_a_restored_position_and_warns_below_it() -> None:
    c = Cursor(10)
    c.restore(epoch=3, position=4, exhausted=False, origin=2, batch=1)
    assert not c.set_epoch(3, "t")
    assert (c.epoch, c.position, c.origin, c.batch) == (3, 4, 2, 1)
    c.restore(epoch=3, position=4, exhausted=False)
    with pytest.warns(UserWarning, match=r"set_epoch\(2\) is below the restored epoch 3"):
        c.set_epoch(2, "t")
    assert (c.epoch, c.position) == (2, 0)


def test_restore_clamps_to_the_end_and_drops_origin_and_exhausted_where_they_mean_nothing() -> None:
    c = Cursor(10)
    c.restore(epoch=0, position=12, exhausted=True, origin=5)
    assert (c.position, c.origin, c.exhausted) == (10, 0, True)
    c.restore(epoch=0, position=6, exhausted=True, origin=8)
    assert (c.position, c.origin, c.exhausted) == (6, 6, False)


def test_the_sampler_and_the_loader_move_one_cursor() -> None:
    sampler = seekdata.DistributedSampler(range(10), 1, 0, seed=0)
    loader = seekdata.StatefulDataLoader(range(10), batch_size=4, sampler=sampler, seed=0)
    it = iter(loader)
    next(it)
    assert sampler.cursor.position == sampler.position == 4
    assert sampler.cursor.batch == loader.state_dict()["step"] == 1
    loader.set_epoch(2)
    assert (sampler.epoch, sampler.position) == (2, 0)
