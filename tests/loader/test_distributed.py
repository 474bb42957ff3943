"""Real processes, gloo on 127.0.0.1: torch.distributed.checkpoint saves and loads the loader."""

from __future__ import annotations

import pathlib

import torch

from tests.helpers.paths import SCRIPTS
from tests.helpers.ranks import run_ranks


def test_dcp_saves_and_loads_the_loader_on_two_ranks(tmp_path: pathlib.Path) -> None:
    args = [str(tmp_path / "ckpt"), str(tmp_path / "out{rank}.pt")]
    run_ranks(SCRIPTS / "_dcp_worker.py", 2, args)
    results = [torch.load(tmp_path / f"out{r}.pt", weights_only=True) for r in range(2)]
    assert all(r["ok"] for r in results), results
    assert results[0]["state"] == results[1]["state"]  # the state is global
    assert results[0]["state"]["world_size"] == 2 and results[0]["steps"] == 5
