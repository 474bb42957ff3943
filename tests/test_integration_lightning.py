"""Lightning with seekdata.integrations.lightning.StepRNGCallback: fit(ckpt_path=...) in a fresh
process is bit-identical to the uninterrupted fit, mid-epoch and at an epoch's end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._fresh import run_fresh

pytest.importorskip("lightning")

W = "_lightning_worker.py"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("lightning")
    return run_fresh(W, tmp / "full.json", tmp / "ckpt", 0, "none"), tmp / "ckpt"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("checkpoint", "step", "workers"),
    [("step=3.ckpt", 3, 2), ("end-epoch=0.ckpt", 6, 0)],  # mid-epoch; an epoch's end
)
def test_fit_from_checkpoint_is_bit_identical(
    uninterrupted: tuple[dict, Path], tmp_path: Path, checkpoint: str, step: int, workers: int
) -> None:
    full, ckpt = uninterrupted
    assert len(full["losses"]) == 12  # 2 epochs of 6 steps
    resumed = run_fresh(
        W, tmp_path / "resumed.json", tmp_path / "ckpt", workers, str(ckpt / checkpoint)
    )
    assert resumed["losses"] == full["losses"][step:]  # every step's loss, exactly
    assert resumed["params"] == full["params"]
