"""One rank of a DDP run over a Mixture changed at resume, for tests/test_mixture_changes.py
(gloo, CPU).

python _mixchange_worker.py MODE BATCH STEPS OUT CKPT
MODE: "full" runs STEPS global steps of the changed mixture (built with the literal position
AT); "save" runs STEPS steps of the original mixture and saves a checkpoint to CKPT; "resume"
loads CKPT, changes the mixture from the state (``changed(state, ...)``) and runs until global
step STEPS. Rank 0 writes, per step run, the global batch's samples (source, index, a
global-RNG draw, a sample_rng draw), sorted, to OUT (JSON).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch.distributed as dist

from seekdata._dist import exit_finished_rank

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import seekdata
from tests._mixsched_worker import Source

LENGTH = 36  # 6 global steps of 6 per mixture epoch
AT = 12  # where "save" stops: 2 global steps of 6
WEIGHTS = {"code": 1, "maths": 2, "books": 1}  # web removed, books added


def original() -> seekdata.Mixture:
    sources = {"web": Source(0, 11), "code": Source(1, 7), "maths": Source(2, 5)}
    return seekdata.Mixture(sources, {"web": 3, "code": 1, "maths": 1}, length=LENGTH, seed=6)


def changed(at: Any) -> seekdata.Mixture:
    return original().changed(
        at, WEIGHTS, add={"books": Source(3, 4)}, remove=["web"], grown={"code": Source(1, 9)}
    )


def main() -> None:
    mode, batch, steps, out, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    saved = seekdata.checkpoint.load_on_every_rank(ckpt) if mode == "resume" else None
    if saved is not None:  # the change decided now, at the checkpoint's position
        mix = changed(saved["loader"])
    else:
        mix = changed(AT) if mode == "full" else original()
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
    exit_finished_rank()  # skips finalization, where torch's gloo threads can abort
