"""One rank of the 2-process gloo test: DCP saves {"loader": loader} mid-epoch, then loads it.

Run by tests/loader/test_distributed.py with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT.
argv: checkpoint dir, output file.
"""

from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from seekdata import exit_ddp

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
import seekdata
from tests.helpers.datasets import GlobalRNGAug


def make() -> seekdata.StatefulDataLoader:
    ds = GlobalRNGAug(26)
    sampler = seekdata.DistributedSampler(ds, seed=4)  # rank and world size from the group
    return seekdata.StatefulDataLoader(ds, batch_size=3, sampler=sampler, num_workers=1, seed=4)


def main() -> None:
    ckpt, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    reference = [b["x"] for b in make()]
    loader = make()
    it = iter(loader)
    head = [next(it)["x"] for _ in range(2)]
    del it
    dcp.save({"loader": loader}, checkpoint_id=ckpt)
    dist.barrier()
    resumed = make()
    dcp.load({"loader": resumed}, checkpoint_id=ckpt)
    rest = [b["x"] for b in resumed]
    ok = len(head + rest) == len(reference) and all(
        torch.equal(a, b) for a, b in zip(reference, head + rest, strict=True)
    )
    torch.save({"ok": ok, "state": resumed.state_dict(), "steps": len(reference)}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
