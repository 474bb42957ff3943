"""``state_dict()`` from another thread (an async checkpoint) is one consistent state: the
cursor is one immutable value replaced whole at every move, so a reader never sees half a move
(the epoch of one step with the position of another)."""

from __future__ import annotations

from typing import Any

import torch

import seekdata

N, B = 8, 4  # two batches an epoch


_FIELDS = {"snapshot", "epoch", "position", "origin", "step", "exhausted", "skips", "ended"}


def test_a_move_landing_in_the_middle_of_state_dict_changes_nothing_it_returns() -> None:
    """Deterministic: another thread's move (here an epoch roll-over) lands right after
    state_dict() first reads the cursor; what it returns is the state before the move, or the
    state after it, never a mix (e.g. the old epoch with the new epoch's position)."""
    from seekdata._core.cursor import Cursor

    loader = seekdata.StatefulDataLoader(torch.arange(N), batch_size=B, seed=0, step_rng=False)
    it = iter(loader)
    next(it)  # epoch 0, position 4, step 1
    cursor = loader._engine.cursor
    before = loader.state_dict()
    armed = [True]

    def roll_over() -> None:  # what the training thread does at the epoch's end
        cursor.finish()
        cursor.begin()

    class Interleaved(Cursor):
        def __getattribute__(self, name: str) -> Any:
            value = object.__getattribute__(self, name)
            if name in _FIELDS and armed[0]:
                armed[0] = False
                roll_over()
            return value

    cursor.__class__ = Interleaved
    try:
        got = loader.state_dict()
    finally:
        cursor.__class__ = Cursor
    after = loader.state_dict()
    assert not armed[0] and after["epoch"] == 1 and after["position"] == 0
    assert got in (before, after), (got, before, after)
