"""One rank of a 2-process gloo DDP job that ends with ``seekdata.exit_ddp()``.

The job trains a DDP model (its backward is what leaves torch's autograd context with gloo's
threads), keeps a loader's worker alive, registers an atexit handler and starts a non-daemon
thread; the test checks that every rank exits 0 and that the handler and the thread ran.
Run by tests/loader/test_distributed.py with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT.
argv: output folder.
"""

from __future__ import annotations

import atexit
import datetime
import os
import pathlib
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import seekdata


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = seekdata.StatefulDataLoader(
        data, batch_size=4, shuffle=True, seed=0, num_workers=1, persistent_workers=True
    )
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2),
                                    torch.nn.Linear(16, 1)))  # fmt: skip
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    it = iter(loader)
    for step in range(8):  # the loader's worker stays alive: the epoch is not over
        x, y = next(it)
        seekdata.set_step_rng(0, step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optim.zero_grad()
        loss.backward()
        optim.step()
    atexit.register((out / f"atexit{rank}").write_text, "ran")

    def late() -> None:
        time.sleep(0.2)
        (out / f"thread{rank}").write_text("joined")

    threading.Thread(target=late).start()  # not a daemon: an exit waits for it
    dist.barrier()
    print(f"rank {rank} done", end="")  # no newline, no flush: exit_ddp flushes
    seekdata.exit_ddp()  # destroys the process group itself


if __name__ == "__main__":
    main()
