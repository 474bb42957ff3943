"""One rank of a DDP run for the elastic global batch test (gloo, CPU).

python _elastic_worker.py MODE BATCH STEPS OUT CKPT
MODE: "full" runs STEPS steps; "save" runs STEPS steps and saves a checkpoint to CKPT;
"resume" loads CKPT and runs until global step STEPS. Rank 0 writes, per step run, the sorted
global sample indices and the global mean loss to OUT (JSON).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import seekdata
from seekdata import exit_ddp

N = 96


class Regression(torch.utils.data.Dataset):
    """Features drawn from torch's global RNG (seekdata keys it per sample), a linear target."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int):
        x = torch.randn(4) + i / N
        return torch.tensor(i), x, x.sum(0, keepdim=True) * 0.5 + 0.1


def main() -> None:
    mode, batch, steps, out, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = Regression()
    sampler = seekdata.DistributedSampler(ds, world, rank, seed=11)
    loader = seekdata.StatefulDataLoader(ds, batch_size=batch, sampler=sampler, seed=11)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    if mode == "resume":
        saved = torch.load(ckpt, weights_only=True)
        loader.load_state_dict(saved["loader"])  # another world size and batch: same global batch
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        step = saved["step"]
    records = []
    epoch = loader.state_dict()["epoch"]
    while step < steps:
        loader.set_epoch(epoch)
        for index, x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()  # DDP averages the gradients: the mean over the global batch
            opt.step()
            gathered: list = [None] * world
            dist.all_gather_object(gathered, (index.tolist(), loss.item() * len(index)))
            samples = sorted(i for part, _ in gathered for i in part)
            records.append({"step": step, "samples": samples,
                            "loss": sum(s for _, s in gathered) / len(samples)})  # fmt: skip
            step += 1
            if step == steps:
                break
        epoch += 1
    if mode == "save" and rank == 0:
        torch.save(
            {"loader": loader.state_dict(), "model": model.module.state_dict(),
             "opt": opt.state_dict(), "step": step},
            ckpt,
        )  # fmt: skip
    if rank == 0:
        with open(out, "w") as f:
            json.dump(records, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
