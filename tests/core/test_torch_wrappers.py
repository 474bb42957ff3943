"""torch's own wrappers (``Subset``, ``ConcatDataset``, ``StackDataset``) around a signed source:
the loader derives their signature from what they wrap, so a changed source behind them is
refused at resume, never resumed silently (docs/sources.md, "torch's wrappers")."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import ConcatDataset, StackDataset, Subset

import seekdata
from seekdata._core import source as _source


class Signed(torch.utils.data.Dataset):
    """A source whose items (and so its signature) are decided by ``items``."""

    def __init__(self, items: list[int]) -> None:
        self.items = list(items)
        self.stream_signature = f"Signed({self.items})"

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> int:
        return self.items[index]


class Plain(Signed):
    """The same items, no signature: a dataset the loader checks by its length only."""

    def __init__(self, items: list[int]) -> None:
        self.items = list(items)


A, A2, B = list(range(10)), [1, 0, *range(2, 10)], list(range(10, 16))

#: (name, what the checkpoint was saved over, what is resumed over instead): each a change
#: behind a torch wrapper that keeps the length (so the length check alone would accept it)
CHANGED: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("Subset: inner reordered", lambda: Subset(Signed(A), [7, 2, 5]),
     lambda: Subset(Signed(A2), [7, 2, 5])),
    ("Subset: other indices", lambda: Subset(Signed(A), [7, 2, 5]),
     lambda: Subset(Signed(A), [7, 2, 4])),
    ("ConcatDataset: a part changed", lambda: ConcatDataset([Signed(A), Signed(B)]),
     lambda: ConcatDataset([Signed(A2), Signed(B)])),
    ("ConcatDataset: parts swapped", lambda: ConcatDataset([Signed(A), Signed(B)]),
     lambda: ConcatDataset([Signed(B), Signed(A)])),
    ("ConcatDataset: a signed part after a plain one",
     lambda: ConcatDataset([Plain(B), Signed(A)]), lambda: ConcatDataset([Plain(B), Signed(A2)])),
    ("StackDataset: a part changed", lambda: StackDataset(Signed(A), Plain(A)),
     lambda: StackDataset(Signed(A2), Plain(A))),
    ("StackDataset: keys swapped", lambda: StackDataset(x=Signed(A), y=Signed(A2)),
     lambda: StackDataset(x=Signed(A2), y=Signed(A))),
    ("nested: Subset of ConcatDataset", lambda: Subset(ConcatDataset([Signed(A), Signed(B)]), [3]),
     lambda: Subset(ConcatDataset([Signed(A2), Signed(B)]), [3])),
]  # fmt: skip


def _loader(dataset: Any) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(dataset, batch_size=1, shuffle=True, seed=5, collate_fn=list)


def _saved(dataset: Any) -> dict[str, Any]:
    loader = _loader(dataset)
    next(iter(loader))
    return json.loads(json.dumps(loader.state_dict()))


@pytest.mark.parametrize(
    ("saved", "changed"), [c[1:] for c in CHANGED], ids=[c[0] for c in CHANGED]
)
def test_a_changed_source_behind_a_torch_wrapper_is_refused(
    saved: Callable[[], Any], changed: Callable[[], Any]
) -> None:
    """Refused with a StateMismatchError naming the dataset, the loader left as it was; the
    same wrapper over the same data resumes; strict=False continues with a warning."""
    state = _saved(saved())
    assert isinstance(state["dataset"], str)
    _loader(saved()).load_state_dict(state)
    loader = _loader(changed())
    before = loader.state_dict()
    with pytest.raises(seekdata.StateMismatchError, match="dataset is"):
        loader.load_state_dict(state)
    assert loader.state_dict() == before
    with pytest.warns(UserWarning, match="strict=False"):
        _loader(changed()).load_state_dict(state, strict=False)


def test_wrappers_of_unsigned_datasets_stay_unsigned() -> None:
    """Nothing signed inside: no signature, as before (the loader checks the length only), so
    the states of plain datasets behind torch's wrappers are unchanged."""
    for dataset in (Subset(Plain(A), [1, 2]), ConcatDataset([Plain(A), Plain(B)]),
                    StackDataset(Plain(A), Plain(A)), Subset(list(range(5)), [0])):  # fmt: skip
        assert _source.stream_signature(dataset) is None
        assert "dataset" not in _saved(dataset)


def test_a_declared_signature_wins_and_the_derived_ones_are_stable() -> None:
    """A subclass that declares its own signature keeps it; the derived ones are pure functions
    of what is wrapped (indices given as a list, a range, a tensor or an array agree)."""

    class Own(Subset):  # type: ignore[type-arg]
        stream_signature = "mine"

    assert _source.stream_signature(Own(Signed(A), [1])) == "mine"
    import numpy as np

    kinds = ([3, 4, 5], range(3, 6), torch.tensor([3, 4, 5]), np.array([3, 4, 5], dtype=np.int32))
    assert len({_source.stream_signature(Subset(Signed(A), k)) for k in kinds}) == 1
    signature = _source.stream_signature(Subset(Signed(A), [3, 4, 5]))
    assert signature is not None and signature.startswith("Subset(3 of Signed(")
    assert _source.stream_signature(
        ConcatDataset([Signed(A), Plain(B)])
    ) == _source.stream_signature(
        ConcatDataset([Signed(A), Plain(list(range(20, 26)))])
    )  # an unsigned part: its length only, as without the wrapper


def test_tar_shards_in_another_order_behind_a_subset_are_refused(tmp_path: pathlib.Path) -> None:
    """The issue's case behind torch's wrappers: ``random_split`` of tar shards (a Subset), and
    a ConcatDataset of two shard sets, resumed over the same shards listed in another order."""
    from seekdata.wds import TarShards
    from tests.helpers.shards import write_shards

    write_shards(tmp_path, n=30, per_shard=10)
    names = sorted(str(p) for p in tmp_path.glob("shard-*.tar"))
    other = [names[1], names[0], names[2]]
    split = torch.utils.data.random_split(
        TarShards(names), [20, 10], torch.Generator().manual_seed(0)
    )
    again = Subset(TarShards(other), split[0].indices)
    pairs = [(split[0], again),
             (ConcatDataset([TarShards(names[:2]), TarShards(names[2:])]),
              ConcatDataset([TarShards(other[:2]), TarShards(other[2:])]))]  # fmt: skip
    for saved, changed in pairs:
        state = _saved(saved)
        loader = _loader(changed)
        before = loader.state_dict()
        with pytest.raises(seekdata.StateMismatchError, match="dataset is"):
            loader.load_state_dict(state)
        assert loader.state_dict() == before
