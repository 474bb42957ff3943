"""An elastic DDP training script: torchrun loses a node or gets one back, the data goes on.

Every (re)start reads the world torchrun gives it (``WORLD_SIZE``, ``RANK``), loads ``global
batch ÷ world size`` samples per rank, and resumes from the newest complete checkpoint
whatever world size wrote it; global step s is the same samples on every world size. Launch
the same line on every node (docs/elastic.md, "Across nodes with torchrun", says why each
setting is there)::

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes=1:2 --nproc-per-node=2 \\
        --max-restarts=3 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 --rdzv-id=job42 \\
        examples/elastic_train.py --out /shared/run --global-batch 16 --ckpt-every 3

(``examples/elastic_train.py`` runs this module; without a checkout, ``-m
seekdata.tools.demo.elastic_train`` in its place does the same. It ships in the package because
``python -m seekdata.demo --elastic`` runs it.)

Each rank appends one JSON line per step to ``<out>/log/<start>-rank<r>.jsonl``: the dataset
indices it consumed and the global mean loss (``<start>`` orders the (re)starts in time); the
first line of each file says which world size started and which checkpoint it resumed from.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import seekdata
from seekdata.checkpoint import CheckpointManager


class Regression(torch.utils.data.Dataset):
    """Sample i: its index, features with random noise (global RNG: seekdata keys it by
    (seed, epoch, i), so it is the same on any rank and any world size), a linear target."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.randn(8) + i / self.n
        return torch.tensor(i), x, x.sum(0, keepdim=True) * 0.5 + 0.1


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for checkpoints and logs (shared)")
    p.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks")
    p.add_argument("--steps", type=int, default=16, help="global steps in all")
    p.add_argument("--ckpt-every", type=int, default=3, help="checkpoint every k steps")
    p.add_argument("--n", type=int, default=96, help="dataset size")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--timeout", type=float, default=60, help="seconds a collective may wait")
    return p.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    after_step: Callable[[int, int, int], None] | None = None,
) -> None:
    """Train to ``--steps``; ``after_step(step, world, rank)`` runs after each logged step."""
    args = parse(argv)
    torch.set_num_threads(1)  # bit-exact CPU math: no thread-count-dependent reductions
    # a collective waits at most this long for a node that vanished without closing its sockets
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    world, rank = dist.get_world_size(), dist.get_rank()  # this (re)start's, from torchrun
    t_init = time.time()
    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optim = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    model = DDP(net)  # a checkpoint loaded into net below is the same on every rank
    start = [time.time_ns()]  # names this start's log files, in time order
    dist.broadcast_object_list(start, src=0)
    t_ready = time.time()

    dataset = Regression(args.n)
    batch = seekdata.elastic.per_rank_batch_size(args.global_batch)  # refuses 16 on 3 ranks
    loader = seekdata.StatefulDataLoader(
        dataset,
        batch_size=batch,
        sampler=seekdata.DistributedSampler(dataset, seed=args.seed),
        seed=args.seed,
    )
    manager = CheckpointManager(Path(args.out) / "ckpt", keep_last=2)
    step, worlds = 0, [world]
    ckpt = manager.load_latest()  # the newest checkpoint that verifies, any world size's
    if ckpt is not None:
        net.load_state_dict(ckpt["model"])
        optim.load_state_dict(ckpt["optim"])
        loader.load_state_dict(ckpt["loader"])  # another world size, the same global batch
        step, worlds = ckpt["step"], sorted({*ckpt["worlds"], world})
    t_resumed = time.time()

    log_dir = Path(args.out) / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"{start[0]}-rank{rank}.jsonl").open("a")
    head = {
        "world": world,
        "rank": rank,
        "resumed_from": step,
        "worlds": worlds,
        "pid": os.getpid(),
    }
    times = {"t_init": t_init, "t_ready": t_ready, "t_resumed": t_resumed}
    log.write(json.dumps({**head, **times}) + "\n")
    log.flush()

    epoch = loader.state_dict()["epoch"]
    while step < args.steps:
        loader.set_epoch(epoch)  # never rewinds a restored epoch
        for index, x, y in loader:
            t_batch = time.time()
            loss = torch.nn.functional.mse_loss(model(x), y)
            optim.zero_grad()
            loss.backward()  # DDP averages the gradients over the global batch
            optim.step()
            total = loss.detach() * len(index)
            dist.all_reduce(total)  # the global mean loss, the same on every rank
            step += 1
            record = {"step": step, "world": world, "samples": index.tolist(),
                      "loss": total.item() / args.global_batch, "t_batch": t_batch,
                      "t": time.time()}  # fmt: skip
            log.write(json.dumps(record) + "\n")
            log.flush()
            if step % args.ckpt_every == 0 or step == args.steps:
                state = {"model": net.state_dict(), "optim": optim.state_dict(),
                         "loader": loader.state_dict(), "step": step, "worlds": worlds}  # fmt: skip
                manager.save(step, state)  # rank 0 writes atomically; every rank waits
            if after_step is not None:
                after_step(step, world, rank)
            if step == args.steps:
                break
        epoch += 1
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    seekdata.exit_ddp()  # torch's gloo threads can abort a finished rank at shutdown
