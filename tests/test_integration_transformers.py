"""HF Trainer through seekdata.integrations.transformers: train(resume_from_checkpoint=...) in a
fresh process is bit-identical to the uninterrupted run, mid-epoch and at an epoch's end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._fresh import run_fresh

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

W = "_transformers_worker.py"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("trainer")
    return run_fresh(W, tmp / "full.json", tmp / "run", 0, "none"), tmp / "run"


@pytest.mark.slow
@pytest.mark.parametrize(("step", "workers"), [(3, 0), (6, 2)])  # mid-epoch; an epoch's end
def test_resume_from_checkpoint_is_bit_identical(
    uninterrupted: tuple[dict, Path], tmp_path: Path, step: int, workers: int
) -> None:
    full, run = uninterrupted
    assert len(full["losses"]) == 12  # 2 epochs of 6 steps
    resumed = run_fresh(
        W, tmp_path / "resumed.json", tmp_path / "out", workers, f"{run}/checkpoint-{step}"
    )
    assert resumed["losses"] == full["losses"][step:]  # every step's loss, exactly
    assert resumed["params"] == full["params"]
    if workers == 0:  # the Trainer's own skip of the first `step` batches read no data
        assert resumed["fetched"] == 4 * (12 - step)
