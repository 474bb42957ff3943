"""One rank of a DDP run over a Mixture with a weight schedule, for
tests/sources/mixtures/test_mixture_schedule.py (gloo, CPU).

python _mixsched_worker.py MODE BATCH STEPS OUT CKPT
MODE: "full" runs STEPS global steps; "save" runs STEPS steps and saves a checkpoint to CKPT;
"resume" loads CKPT and runs until global step STEPS. Rank 0 writes, per step run, the global
batch's samples (source, index, a global-RNG draw, a sample_rng draw), sorted, to OUT (JSON).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import seekdata
from seekdata import exit_ddp

LENGTH = 36  # 6 global steps of 6 per mixture epoch
#: changes inside a step and inside the second epoch: source 2 starts at 14, source 0 stops at
#: 27 and comes back at 45, continuing from its count
SCHEDULE = [
    (0, {"web": 3, "code": 1}),
    (14, {"web": 1, "code": 1, "maths": 1}),
    (27, {"code": 2, "maths": 1}),
    (45, {"web": 1, "code": 1, "maths": 2}),
]


class Source(torch.utils.data.Dataset):
    def __init__(self, name: int, n: int) -> None:
        self.name, self.n = name, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int, float, float]:
        return self.name, i, torch.rand(1).item(), float(seekdata.sample_rng().random())


def mixture() -> seekdata.Mixture:
    sources = {"web": Source(0, 11), "code": Source(1, 7), "maths": Source(2, 5)}
    return seekdata.Mixture(sources, schedule=SCHEDULE, length=LENGTH, seed=6)


def main(make: Callable[[str, Any], seekdata.Mixture] = lambda mode, saved: mixture()) -> None:
    """``make(mode, saved checkpoint or None)``: the mixture this rank iterates."""
    mode, batch, steps, out, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    saved = seekdata.checkpoint.load_on_every_rank(ckpt) if mode == "resume" else None
    mix = make(mode, saved)
    sampler = seekdata.DistributedSampler(mix, world, rank, shuffle=False)
    loader = seekdata.StatefulDataLoader(
        mix, batch_size=batch, sampler=sampler, seed=2, collate_fn=list
    )
    step = 0
    if saved is not None:
        loader.load_state_dict(saved["loader"])  # another world size: the same global batch
        step = saved["step"]
    records = []
    epoch = loader.state_dict()["epoch"]
    while step < steps:
        loader.set_epoch(epoch)
        for b in loader:
            gathered: list = [None] * world
            dist.all_gather_object(gathered, [list(sample) for sample in b])
            records.append({"step": step, "samples": sorted(s for part in gathered for s in part)})
            step += 1
            if step == steps:
                break
        epoch += 1
    if mode == "save":
        seekdata.checkpoint.save_on_rank0({"loader": loader.state_dict(), "step": step}, ckpt)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(records, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
