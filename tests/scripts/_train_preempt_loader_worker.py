"""One rank of a gloo job for tests/test_preemption.py, with a real loader and its workers.

``python _train_preempt_loader_worker.py TMP preempt WORKERS PERSISTENT`` runs the documented
preemption pattern (docs/slurm.md) on DDP until ``should_stop()`` agrees, checkpoints that step
with CheckpointManager and reports it; the test signals every process of the job meanwhile.
``... TMP resume WORKERS PERSISTENT UNTIL`` resumes from that checkpoint up to step UNTIL, then
trains an uninterrupted run to UNTIL in the same job, and rank 0 saves both models' weights.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import seekdata
from seekdata import exit_ddp
from seekdata.checkpoint import CheckpointManager, load_on_every_rank

SEED, BATCH, READY_AT = 5, 4, 3
MAX_STEPS = 10**7  # a bound for the loop; the test's timeout ends a job that never stops


class Noisy(torch.utils.data.Dataset):
    """Samples with augmentation randomness drawn from global RNG, as user transforms do."""

    def __init__(self) -> None:
        self.x = torch.arange(48 * 4, dtype=torch.float32).reshape(48, 4) / 100

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + torch.rand(4), self.x[i].sum(0, keepdim=True)


def train(ckpt: Path | None, workers: int, persistent: bool, until: int, tmp: Path) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    dataset = Noisy()
    sampler = seekdata.DistributedSampler(dataset, seed=SEED)
    loader = seekdata.StatefulDataLoader(
        dataset,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=persistent,
        seed=SEED,
    )
    manager = CheckpointManager(ckpt) if ckpt is not None else None
    step, epoch = 0, 0
    if manager is not None and manager.latest() is not None:
        state = load_on_every_rank(manager.latest())
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        loader.load_state_dict(state["loader"])
        step, epoch = state["step"], state["epoch"]
    net = DDP(model)
    rank = dist.get_rank()
    with seekdata.PreemptionHandler() as preemption:  # before the loader starts workers
        while step < until:
            sampler.set_epoch(epoch)
            for x, y in loader:
                seekdata.set_step_rng(SEED, step)
                loss = F.mse_loss(net(x), y)
                optim.zero_grad()
                loss.backward()
                optim.step()
                step += 1
                if step == READY_AT and until == MAX_STEPS:
                    (tmp / f"ready{rank}").write_text(str(os.getpid()))
                if preemption.should_stop() or step == until:
                    break
            else:
                epoch += 1
                continue
            break
        if manager is not None and preemption.should_stop():
            state = {
                "model": model.state_dict(),
                "optim": optim.state_dict(),
                "loader": loader.state_dict(),
                "step": step,
                "epoch": epoch,
            }
            manager.save(step, state)
        received = preemption.received
    return {
        "step": step,
        "received": None if received is None else received.name,
        "weights": model.state_dict(),
    }


def main() -> None:
    tmp, mode, workers, persistent = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    flag = persistent == "persistent"
    if mode == "preempt":
        out = train(tmp / "ckpt", workers, flag, MAX_STEPS, tmp)
        result = {"stopped_at": out["step"], "received": out["received"]}
    else:
        until = int(sys.argv[5])
        resumed = train(tmp / "ckpt", workers, flag, until, tmp)
        fresh = train(None, workers, flag, until, tmp)
        if rank == 0:
            torch.save({"resumed": resumed["weights"], "fresh": fresh["weights"]}, tmp / "w.pt")
        result = {"resumed_to": resumed["step"], "fresh_to": fresh["step"]}
    dist.destroy_process_group()
    (tmp / f"result{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
