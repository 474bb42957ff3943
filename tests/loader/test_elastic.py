"""Elastic global batch in real DDP processes: saved at W=2, B=8, resumed at W'=4, B'=4 and
W'=1, B'=16 — every later global step sees the same samples, and the loss curve matches."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest

from tests.helpers.forker import Forker
from tests.helpers.paths import SCRIPTS
from tests.helpers.ranks import run_ranks

STEPS, SAVE_AT = 10, 3  # 6 global steps per epoch: the resumed run crosses an epoch end
TOLERANCE = 1e-5  # relative: float reduction over other groupings of the same samples


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """torch imported once; each rank is a process forked from it."""
    with Forker("torch", "torch.distributed", "seekdata") as server:
        yield server


def run(
    forker: Forker, world: int, mode: str, batch: int, steps: int, tmp: pathlib.Path, name: str
) -> list:
    out = tmp / f"{name}.json"
    run_ranks(
        SCRIPTS / "_elastic_worker.py",
        world,
        [mode, str(batch), str(steps), str(out), str(tmp / "ckpt.pt")],
        forker=forker,
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def saved(
    tmp_path_factory: pytest.TempPathFactory, forker: Forker
) -> tuple[list, list, pathlib.Path]:
    """The uninterrupted run at W=2, B=8 and the one saved at SAVE_AT (its checkpoint in the
    folder), made once for every resume: (full, head, folder)."""
    tmp = tmp_path_factory.mktemp("elastic")
    full = run(forker, 2, "full", 8, STEPS, tmp, "full")
    head = run(forker, 2, "save", 8, SAVE_AT, tmp, "head")
    return full, head, tmp


@pytest.mark.parametrize(("world", "batch"), [(4, 4), (1, 16)])
def test_a_ddp_run_resumed_with_the_same_global_batch_is_the_same_run(
    world: int, batch: int, saved: tuple[list, list, pathlib.Path], forker: Forker
) -> None:
    full, head, tmp = saved
    rest = run(forker, world, "resume", batch, STEPS, tmp, f"rest{world}")
    assert [r["samples"] for r in head] == [r["samples"] for r in full[:SAVE_AT]]
    assert [r["step"] for r in rest] == list(range(SAVE_AT, STEPS))
    for ours, ref in zip(rest, full[SAVE_AT:], strict=True):
        assert ours["samples"] == ref["samples"], ours["step"]  # exact: the same sample set
        assert ours["loss"] == pytest.approx(ref["loss"], rel=TOLERANCE), ours["step"]
    assert len({i for r in full[:6] for i in r["samples"]}) == 96  # an epoch: each sample once
