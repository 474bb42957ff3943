"""Thread workers on a GPU machine (issue 38): 16 threads against 16 processes against torch's
DataLoader on the JPEG pipeline of benchmarks/threads.py, with ``pin_memory=True`` and each batch
moved with ``.to("cuda", non_blocking=True)``.

The loaders run in a new random order every round, one loader's workers gone before the next
starts, ``--epochs`` epochs each with persistent workers; the figure is samples/s, the median
of ``--rounds`` rounds, and each loader's ratio to seekdata's process workers. Without CUDA it
says so and exits 0 without a figure (nothing is measured on the CPU in its place).
``--device cpu`` is a dry run of the same code on the CPU (no pinning, which needs an
accelerator; a copy to the CPU), so that the script is known to run before a GPU machine
runs it: its JSON says ``"dry_run": true`` and its figures mean nothing.

    python benchmarks/threads_gpu.py                           # on a machine with CUDA
    python benchmarks/threads_gpu.py --quick                   # a smoke run
    python benchmarks/threads_gpu.py --device cpu --quick      # a dry run without a GPU
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch

import seekdata
from _harness import interleave, median, parser, quiet, table, wait_workers
from _harness import write as write_json
from threads import Jpegs, _nodes_fetch


def _make(ds: Any, loader: str, workers: int, batch: int, pin: bool) -> Any:
    if loader == "torch DataLoader":
        return torch.utils.data.DataLoader(
            _nodes_fetch(ds), batch_size=batch, shuffle=True, num_workers=workers,
            persistent_workers=True, pin_memory=pin,
        )  # fmt: skip
    method = "thread" if loader == "seekdata threads" else "multiprocessing"
    return seekdata.StatefulDataLoader(
        ds, batch_size=batch, shuffle=True, seed=0, num_workers=workers,
        persistent_workers=True, pin_memory=pin, worker_method=method,
    )  # fmt: skip


def _case(
    ds: Any, loader: str, workers: int, batch: int, epochs: int, device: str
) -> Callable[[], float]:
    cuda = device == "cuda"

    def run() -> float:
        with quiet():
            made = _make(ds, loader, workers, batch, pin=cuda)
            seen = 0
            start = time.perf_counter()
            for _ in range(epochs):
                for images in made:
                    on_gpu = images.to(device, non_blocking=True)
                    seen += len(on_gpu)
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
        del made
        wait_workers()
        return seen / elapsed

    return run


def main() -> int:
    p = parser(__doc__.split("\n")[0], "threads_gpu")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--images", type=int, default=4096)
    p.add_argument("--side", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help='"cuda" (default) or "cpu": a dry run of the code, no figures')  # fmt: skip
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "threads_gpu: CUDA is not available on this machine, so nothing is measured (this "
            "figure needs pinned memory and a copy to a GPU); run it on a machine with CUDA, "
            "or pass --device cpu for a dry run of the code"
        )
        return 0
    if args.quick:
        args.images, args.epochs, args.rounds = min(args.images, 512), 1, 1
    torch.set_num_threads(1)  # as in a worker process: the comparison is of the workers
    ds = Jpegs(args.images, args.side, args.side * 7 // 8)
    loaders = ("seekdata threads", "seekdata processes", "torch DataLoader")
    cases = {
        name: _case(ds, name, args.workers, args.batch, args.epochs, args.device)
        for name in loaders
    }
    runs = interleave(cases, args.rounds)
    base = median(runs["seekdata processes"])
    rows = [
        {
            "loader": name,
            "workers": args.workers,
            "samples_per_s": round(median(values), 1),
            "vs_processes": round(median(values) / base, 2),
            "rounds": [round(v, 1) for v in values],
        }
        for name, values in runs.items()
    ]
    print(table(rows, ["loader", "workers", "samples_per_s", "vs_processes"]))
    write_json(
        args.out,
        "threads_gpu",
        rows,
        device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        dry_run=args.device == "cpu",
        args=vars(args) | {"out": str(args.out)},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
