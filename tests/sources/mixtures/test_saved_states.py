"""States saved by an earlier release still resume: a mixture's records (``prefix``, ``history``,
``sources``), which the mixture now writes and checks itself under the one key it owns
(``source``, format version 2), read from the top level where the first format wrote them.

``states/mixture_02bdffb.json`` was written by commit 02bdffb (before the mixture owned its
records) with ``python tests/sources/mixtures/test_saved_states.py`` run against that commit's
source; never regenerate it with a later one: it is the checkpoint a user already has.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import torch

import seekdata
from seekdata._core.state import VERSION, upgrade
from tests.helpers.mixtures import Source

FIXTURE = pathlib.Path(__file__).parent / "states" / "mixture_02bdffb.json"
SAVED_AT = 7  # batches before the state was saved
AFTER = 6  # batches recorded after it
RECORDS = ("prefix", "history", "sources")  # a mixture's records, top-level in the first format
LOADER_ONLY = ("step", "batch_size", "batch_drop_last", "sample_seed")


class Signed(Source):
    """A source with a stream of its own: the state records its signature (``sources``)."""

    @property
    def stream_signature(self) -> str:
        return f"Signed({self.name}, n={self.n})"

    def signature_of_first(self, n: int) -> str:
        return f"Signed({self.name}, n={n})"


def mixture() -> seekdata.Mixture:
    """A scheduled mixture of signed sources with a change at resume: every record a state
    over a mixture can hold."""
    sources = {"web": Signed(0, 5), "code": Signed(1, 7), "maths": Signed(2, 4)}
    schedule = [(0, {"web": 3, "code": 1}), (8, {"web": 1, "code": 1, "maths": 1})]
    mix = seekdata.Mixture(sources, schedule=schedule, length=10, seed=3)
    return mix.changed(4, {"code": 1, "maths": 1, "books": 2}, add={"books": Signed(3, 3)})


def loader() -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(mixture(), batch_size=2, seed=0)


def batches(dl: seekdata.StatefulDataLoader, count: int) -> list[dict[str, Any]]:
    """The next ``count`` batches over epochs, JSON-native (sources, indices, both draws)."""
    out: list[dict[str, Any]] = []
    while len(out) < count:
        for b in dl:
            out.append({k: b[k].tolist() for k in ("source", "index", "x", "y")})
            if len(out) == count:
                break
        else:
            dl.set_epoch(dl.state_dict()["epoch"] + 1)
    return out


def write() -> None:
    """The fixture: the state after ``SAVED_AT`` batches and the ``AFTER`` batches that follow."""
    dl = loader()
    batches(dl, SAVED_AT)
    state = json.loads(json.dumps(dl.state_dict()))
    following = batches(dl, AFTER)
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps({"state": state, "batches": following}, indent=1) + "\n")


def test_a_mixture_state_saved_before_the_mixture_owned_its_records_resumes() -> None:
    saved = json.loads(FIXTURE.read_text())
    state = saved["state"]
    # the records a mixture writes, as the earlier release wrote them
    assert {"dataset", "prefix", "history", "sources"} <= set(state)
    assert [r["at"] for r in state["history"]] == [4]
    dl = loader()
    dl.load_state_dict(state)
    assert batches(dl, AFTER) == saved["batches"]
    # and this release writes the same records at the same point, under the mixture's key
    again = loader()
    batches(again, SAVED_AT)
    now = json.loads(json.dumps(again.state_dict()))
    assert now == upgrade(state)
    assert now["source"] == {"kind": "Mixture", **{k: state[k] for k in RECORDS}}
    assert set(now) & set(RECORDS) == set() and now["seekdata"] == 2 == VERSION
    assert {k: v for k, v in now.items() if k not in ("source", "unit", "seekdata")} == {
        k: v for k, v in state.items() if k not in (*RECORDS, "seekdata")
    }  # every other key as it was written; the position counts samples
    assert now["unit"] == "samples"


def test_the_conversion_of_a_first_format_state_is_pure_and_keeps_newer_ones() -> None:
    state = json.loads(FIXTURE.read_text())["state"]
    frozen = json.dumps(state)
    converted = upgrade(state)
    assert json.dumps(state) == frozen  # the caller's state is left as it was
    assert upgrade(converted) is converted  # a state of this format is returned as is
    for other in (None, [state], {"seekdata": 99}, {"seekdata": True, "prefix": "x"}):
        assert upgrade(other) is other  # not a state of the first format: judged elsewhere


@pytest.mark.parametrize("where", ["loader", "sampler"])
def test_a_first_format_state_with_a_malformed_record_is_refused_by_the_mixture(
    where: str,
) -> None:
    state = json.loads(FIXTURE.read_text())["state"]
    state["prefix"] = 5  # the first format typed it in the core; now the mixture checks it
    if where == "sampler":
        state = {k: v for k, v in state.items() if k not in LOADER_ONLY} | {"kind": "sampler"}
        dl: Any = seekdata.DistributedSampler(mixture(), 1, 0, shuffle=False, seed=0)
    else:
        dl = loader()
    with pytest.raises(
        seekdata.StateMismatchError, match=r"state\['source'\]\['prefix'\] must be str; got int 5"
    ):
        dl.load_state_dict(state)


def test_a_saved_mixture_state_is_refused_by_another_mixture_with_the_mixtures_wording() -> None:
    state = json.loads(FIXTURE.read_text())["state"]
    other = seekdata.Mixture({"web": Signed(0, 5), "code": Signed(1, 7)}, [1, 1], length=10)
    for dataset in (other, torch.utils.data.ConcatDataset([Signed(0, 5), Signed(1, 5)])):
        with pytest.raises(seekdata.StateMismatchError) as e:
            seekdata.StatefulDataLoader(dataset, batch_size=2, seed=0).load_state_dict(state)
        assert "the same sources, weights and seed" in str(e.value)


if __name__ == "__main__":
    write()
