"""Thread workers against process workers, torch's DataLoader, torchdata.nodes and SPDL (issue 38).

Each measurement runs its loaders in a new random order every round, one loader's workers gone
before the next starts (``wait_workers``), and reports the median of the rounds:

- **JPEG pipeline** (Pillow's decode releases the GIL): synthetic JPEGs decoded with Pillow,
  a random crop and flip from ``seekdata.transforms`` on the sample's own stream, batch 64,
  ``--workers`` workers: seekdata threads, seekdata processes, torch's DataLoader (processes),
  ``torchdata.nodes.ParallelMapper(method="thread")`` and SPDL 0.8's thread pipeline
  (``spdl.pipeline.PipelineBuilder``: the same decode as a ``pipe`` stage with ``concurrency``
  = workers, in input order, then ``aggregate`` and collate) over the same dataset. Samples/s
  over ``--epochs`` epochs, workers started once (persistent). A loader whose package is not
  installed is skipped, and the output says so.
- **pure Python** (``__getitem__`` holds the GIL): the same loaders on a loop of Python
  arithmetic per sample: where threads lose.
- **persistent_workers=False over a dataset holding ``--strings`` Python strings** (2 million by
  default), ``--first-workers`` workers (4), shuffled, threads against processes: ``iter()`` to
  the first batch, and the memory of the job: the sum of the PSS (``/proc/<pid>/smaps_rollup``)
  of the job's process (a fresh one per job: this script with ``--job``, so the harness's own
  imports are not counted) and its worker processes after ``--pss-batches`` batches (a forked
  worker's copy of the strings is shared with the parent until touched; reading a string
  writes its reference count, which copies its page into that worker).

    python benchmarks/threads.py            # the figures in docs/threads.md
    python benchmarks/threads.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import torch

import seekdata
from _harness import interleave, median, parser, pyplot, quiet, save, table, wait_workers
from _harness import write as write_json
from seekdata import transforms


class Jpegs(torch.utils.data.Dataset):
    """``n`` synthetic JPEGs, decoded with Pillow, cropped and flipped on the sample's stream."""

    def __init__(self, n: int, side: int, crop: int) -> None:
        from PIL import Image

        gen = np.random.default_rng(0)
        self.blobs = []
        for _ in range(n):
            pixels = gen.integers(0, 255, (side // 8, side // 8, 3), dtype=np.uint8)
            img = Image.fromarray(pixels).resize((side, side), Image.BILINEAR)
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=90)
            self.blobs.append(buf.getvalue())
        self.pipe = transforms.Compose(
            [transforms.RandomCrop(crop), transforms.RandomHorizontalFlip()]
        )

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(self.blobs[i])) as img:
            array = np.array(img.convert("RGB"))  # writable: torch wants to own it
        tensor = torch.from_numpy(array).permute(2, 0, 1)
        return self.pipe(tensor, seekdata.sample_rng())


class PurePython(torch.utils.data.Dataset):
    """``__getitem__`` is Python arithmetic: it holds the GIL throughout."""

    def __init__(self, n: int, work: int) -> None:
        self.n, self.work = n, work

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        x = i
        for k in range(self.work):
            x = (x * 31 + k) % 1000003
        return torch.tensor([i, x])


class Strings(torch.utils.data.Dataset):
    """A dataset holding ``n`` Python strings (what a process worker gets a copy of)."""

    def __init__(self, n: int) -> None:
        self.names = [f"sample-{i:09d}.jpg" for i in range(n)]

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> int:
        return len(self.names[i])


def _throughput(make: Callable[[], Any], epochs: int, samples: int) -> Callable[[], float]:
    def run() -> float:
        loader = make()
        with quiet():
            start = time.perf_counter()
            seen = 0
            for _ in range(epochs):
                for batch in loader:
                    seen += len(batch)
            elapsed = time.perf_counter() - start
        del loader
        wait_workers()
        return seen / elapsed if seen else 0.0

    return run


def _seekdata(ds: Any, method: str, workers: int, batch: int) -> Callable[[], Any]:
    return lambda: seekdata.StatefulDataLoader(
        ds,
        batch_size=batch,
        shuffle=True,
        seed=0,
        num_workers=workers,
        persistent_workers=True,
        worker_method=method,
    )


def _torch(ds: Any, workers: int, batch: int) -> Callable[[], Any]:
    return lambda: torch.utils.data.DataLoader(
        ds, batch_size=batch, shuffle=True, num_workers=workers, persistent_workers=True
    )


class _Nodes:
    """torchdata.nodes: a sampler's indices, ParallelMapper(method="thread") reading samples,
    batched and collated: re-made every epoch as one would with a sampler."""

    def __init__(self, ds: Any, workers: int, batch: int) -> None:
        self.ds, self.workers, self.batch = ds, workers, batch

    def __iter__(self) -> Any:
        from torchdata import nodes

        order = torch.randperm(len(self.ds)).tolist()
        node: Any = nodes.SamplerWrapper(order)
        node = nodes.ParallelMapper(
            node, map_fn=self.ds.__getitem__, num_workers=self.workers, method="thread"
        )
        node = nodes.Batcher(node, batch_size=self.batch, drop_last=False)
        node = nodes.Mapper(node, torch.utils.data.default_collate)
        return iter(nodes.Loader(node))


def _nodes_fetch(ds: Any) -> Any:
    """torchdata.nodes has no seekdata fetch context: sample_rng() is keyed here per call."""

    class Keyed(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(ds)

        def __getitem__(self, i: int) -> Any:
            with seekdata.rng.sample_scope(0, 0, i, reseed_global_rng=False):
                return ds[i]

    return Keyed()


class _Spdl:
    """SPDL 0.8's thread pipeline: a shuffled order as the source, the dataset's read as a
    ``pipe`` stage (``concurrency`` = workers, input order), batched and collated; built per
    epoch, as its docs build one per epoch."""

    def __init__(self, ds: Any, workers: int, batch: int) -> None:
        self.ds, self.workers, self.batch = ds, workers, batch

    def __iter__(self) -> Any:
        from spdl.pipeline import PipelineBuilder

        order = torch.randperm(len(self.ds)).tolist()
        pipeline = (
            PipelineBuilder()
            .add_source(order)
            .pipe(self.ds.__getitem__, concurrency=self.workers, output_order="input")
            .aggregate(self.batch)
            .pipe(torch.utils.data.default_collate)
            .add_sink(3)
            .build(num_threads=self.workers)
        )
        with pipeline.auto_stop():
            yield from pipeline


#: loader -> the package it needs (skipped, with a note, where it is not installed)
_NEEDS = {"torchdata.nodes threads": "torchdata", "SPDL threads": "spdl"}


def missing(loader: str) -> str | None:
    """The package ``loader`` needs when it is not installed, else None."""
    package = _NEEDS.get(loader)
    return package if package and importlib.util.find_spec(package) is None else None


def throughput_rows(
    name: str, ds: Any, workers: int, batch: int, epochs: int, rounds: int
) -> list[dict[str, Any]]:
    cases = {
        "seekdata threads": _throughput(_seekdata(ds, "thread", workers, batch), epochs, len(ds)),
        "seekdata processes": _throughput(
            _seekdata(ds, "multiprocessing", workers, batch), epochs, len(ds)
        ),
        "torch DataLoader": _throughput(_torch(_nodes_fetch(ds), workers, batch), epochs, len(ds)),
        "torchdata.nodes threads": _throughput(
            lambda: _Nodes(_nodes_fetch(ds), workers, batch), epochs, len(ds)
        ),
        "SPDL threads": _throughput(
            lambda: _Spdl(_nodes_fetch(ds), workers, batch), epochs, len(ds)
        ),
    }
    for loader in list(cases):
        if missing(loader):
            print(f"skipped {loader}: {missing(loader)} is not installed", file=sys.stderr)
            del cases[loader]
    runs = interleave(cases, rounds)
    base = median(runs["seekdata processes"])
    return [
        {
            "pipeline": name,
            "loader": loader,
            "samples_per_s": round(median(values), 1),
            "vs_processes": round(median(values) / base, 2),
            "rounds": [round(v, 1) for v in values],
        }
        for loader, values in runs.items()
    ]


def pss_mb(pids: list[int]) -> float:
    """The sum of the proportional set sizes of ``pids``, in MB: each shared page counted once
    over the processes that share it (``/proc/<pid>/smaps_rollup``, Linux)."""
    total_kb = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            total_kb += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    return total_kb / 1024


def one_job(method: str, n: int, workers: int, batches: int) -> tuple[float, float]:
    """One job, in this process: ``iter()`` -> first batch of a shuffled loader over ``n``
    strings, and the sum of the PSS of this process and its workers after ``batches``
    batches."""
    ds = Strings(n)
    linux = os.path.exists("/proc/self/smaps_rollup")
    with quiet():  # torch's warning on more workers than CPUs
        loader = seekdata.StatefulDataLoader(  # shuffled, as training reads it
            ds, batch_size=64, shuffle=True, seed=0, num_workers=workers, worker_method=method,
        )  # fmt: skip
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        elapsed = time.perf_counter() - start
        for _ in range(batches - 1):
            next(it)
        pids = [os.getpid(), *(c.pid for c in multiprocessing.active_children())]
        pss = pss_mb([p for p in pids if p is not None]) if linux else float("nan")
    del it, loader
    wait_workers()
    return elapsed, pss


def first_batch_rows(n: int, workers: int, rounds: int, batches: int) -> list[dict[str, Any]]:
    """``persistent_workers=False``: ``iter()`` -> first batch, and the job's PSS after
    ``batches`` batches, threads against processes. Each job is a fresh process (this
    script, ``--job``): its memory is a training script's, not this harness's (which has
    imported every loader and built the JPEG set by then)."""

    def case(method: str) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            argv = ["--job", method, "--strings", str(n), "--first-workers", str(workers),
                    "--pss-batches", str(batches)]  # fmt: skip
            done = subprocess.run(
                [sys.executable, os.path.abspath(__file__), *argv],
                capture_output=True, text=True, timeout=1800,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(done.stderr[-2000:])
            elapsed, pss = json.loads(done.stdout.strip().splitlines()[-1])
            return float(elapsed), float(pss)

        return run

    runs = interleave({"threads": case("thread"), "processes": case("multiprocessing")}, rounds)
    base = median([t for t, _ in runs["processes"]])
    base_pss = median([m for _, m in runs["processes"]])
    return [
        {
            "loader": f"seekdata {method}",
            "strings": n,
            "workers": workers,
            "first_batch_s": round(median([t for t, _ in values]), 4),
            "vs_processes": round(median([t for t, _ in values]) / base, 3),
            "rounds": [round(t, 4) for t, _ in values],
            "pss_mb": round(median([m for _, m in values]), 1),
            "pss_vs_processes": round(median([m for _, m in values]) / base_pss, 3),
            "pss_rounds": [round(m, 1) for _, m in values],
            "pss_after_batches": batches,
        }
        for method, values in runs.items()
    ]


def main() -> None:
    p = parser(__doc__.split("\n")[0], "threads")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--side", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--strings", type=int, default=2_000_000)
    p.add_argument("--first-workers", type=int, default=4)
    p.add_argument("--pss-batches", type=int, default=2000)
    p.add_argument(
        "--parts", default="throughput,memory", help="what to run: throughput, memory, or both"
    )
    p.add_argument("--job", choices=["thread", "multiprocessing"],
                   help=argparse.SUPPRESS)  # one memory job, run by first_batch_rows  # fmt: skip
    args = p.parse_args()
    if args.job is not None:
        torch.set_num_threads(1)
        figures = one_job(args.job, args.strings, args.first_workers, args.pss_batches)
        print(json.dumps(figures))
        return
    parts = set(args.parts.split(","))
    if args.quick:
        args.images, args.side, args.epochs, args.rounds = 128, 128, 1, 1
        args.strings, args.pss_batches = min(args.strings, 100_000), 50
    torch.set_num_threads(1)  # as in a worker process: the comparison is of the workers
    rows: list[dict[str, Any]] = []
    pipelines = {
        "JPEG decode + crop/flip": lambda: Jpegs(args.images, args.side, args.side * 7 // 8),
        "pure-Python __getitem__": lambda: PurePython(args.images * 4, 3000),
    }
    if "throughput" in parts:
        for name, make in pipelines.items():
            rows += throughput_rows(name, make(), args.workers, args.batch, args.epochs,
                                    args.rounds)  # fmt: skip
        print(table(rows, ["pipeline", "loader", "samples_per_s", "vs_processes"]))
    first: list[dict[str, Any]] = []
    if "memory" in parts:
        first = first_batch_rows(args.strings, args.first_workers, args.rounds, args.pss_batches)
        print(table(first, ["loader", "strings", "workers", "first_batch_s", "vs_processes",
                            "pss_mb", "pss_vs_processes"]))  # fmt: skip
    skipped = {
        loader: f"{missing(loader)} is not installed" for loader in _NEEDS if missing(loader)
    }
    versions = {}
    if not missing("SPDL threads"):
        from importlib.metadata import version

        versions["spdl"] = version("spdl")
    write_json(
        args.out,
        "threads",
        rows,
        first_batch=first,
        args=vars(args) | {"out": str(args.out)},
        skipped=skipped,
        versions=versions,
    )
    plt = pyplot()
    if plt is not None:
        fig, axes = plt.subplots(1, 3, figsize=(16, 4))
        for ax, name in zip(axes, pipelines, strict=False):
            part = [r for r in rows if r["pipeline"] == name]
            ax.barh([r["loader"] for r in part], [r["samples_per_s"] for r in part])
            ax.set_title(f"{name}, {args.workers} workers")
            ax.set_xlabel("samples/s (median)")
        ax = axes[2]
        ax.barh([r["loader"] for r in first], [r["pss_mb"] for r in first])
        ax.set_title(f"PSS of the job, {args.first_workers} workers, {args.strings:,} strings")
        ax.set_xlabel("MB (median)")
        fig.tight_layout()
        save(fig, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
