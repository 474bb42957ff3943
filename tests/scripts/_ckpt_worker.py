"""One rank of a gloo job for tests/checkpoint/test_checkpoint.py:
``python _ckpt_worker.py TMP MODE``."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from seekdata import exit_ddp
from seekdata.checkpoint import CheckpointManager, load_on_every_rank, save_on_rank0


def save_then_load(tmp: Path, rank: int) -> dict:
    # Rank 0's object is large enough that a rank which did not wait would find no file.
    obj = {"w": torch.full((1 << 20,), float(rank)), "by": rank}
    path = save_on_rank0(obj, tmp / "ckpt" / "model.pt")
    loaded = load_on_every_rank(path)
    manager = CheckpointManager(tmp / "steps", keep_last=2)
    for step in range(1, 5):
        manager.save(step, {"step": step, "by": rank})
    latest = manager.load_latest()
    return {
        "by": loaded["by"],
        "w_sum": float(loaded["w"].sum()),
        "device": str(loaded["w"].device),
        "steps": manager.steps(),
        "latest_step": latest["step"],
        "latest_by": latest["by"],
    }


def rank0_fails(tmp: Path, rank: int) -> dict:
    (tmp / "not_a_dir").write_text("x")
    try:
        save_on_rank0({"x": rank}, tmp / "not_a_dir" / "model.pt")
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}
    return {"error": None}


def main() -> None:
    tmp, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    result = {"save_then_load": save_then_load, "rank0_fails": rank0_fails}[mode](tmp, rank)
    dist.barrier()
    dist.destroy_process_group()
    (tmp / f"result{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
