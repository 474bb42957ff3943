"""``seekdata bench``'s run: the sweep, its tables, the JSON and the plot (imports torch)."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
from typing import Any

import torch

from seekdata.tools.bench._harness import LOADERS, Progress, pyplot, quiet, table, write
from seekdata.tools.bench._measure import resume_sweep
from seekdata.tools.bench._report import (
    PICK,
    RATIOS,
    THREAD_RATIO,
    THREADS,
    loaders_for,
    resume_table,
    sweep,
    workload,
)
from seekdata.tools.bench._report import plot as draw

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run the sweep that ``args`` (from :func:`add_parser`) describes; returns 0."""
    with quiet():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    cpus = os.cpu_count() or 1
    quick = args.quick
    notes: list[str] = []
    plot = _can_plot()
    if not plot:  # said before the run, so that nobody waits for a plot that will not come
        notes.append(_NO_PLOT)
        print(f"seekdata bench: {_NO_PLOT}", file=sys.stderr, flush=True)
    workers = args.workers or [w for w in ((0, 1) if quick else (0, 1, 2, 4, 8, 16)) if w <= cpus]
    if args.workers is None and not quick:
        notes.append(f"num_workers capped at os.cpu_count() = {cpus}; pass --workers to override")
    batch_sizes = args.batch_sizes or ([32] if quick else [32, 256])
    batches = args.batches or (5 if quick else 100)
    rounds = args.rounds or (1 if quick else 3)
    cuda = torch.cuda.is_available()
    pins = {"both": [False, True], "on": [True], "off": [False]}[args.pin_memory]
    if not cuda and True in pins:
        pins = [False]
        notes.append("pin_memory=True skipped: pinning needs CUDA, and none is available")
    device = "cuda" if cuda else None
    if cuda:
        notes.append('each batch is moved with .to("cuda", non_blocking=True) inside the loop')
    positions = args.resume_positions or ([100, 1000] if quick else [1000, 100_000, 1_000_000])
    resume_n = args.resume_n or (10_000 if quick else 10_000_000)
    resume_workers = [0] if quick else sorted({0, min(2, cpus)})
    if not args.no_resume and max(positions) > resume_n:
        raise ValueError(
            f"--resume-positions must be at most --resume-n ({resume_n}); got {max(positions)}; "
            f"pass smaller positions or a larger --resume-n"
        )
    configs = [(w, b, pin) for w in workers for b in batch_sizes for pin in pins]
    n = max(2**16, (batches + 2) * max(batch_sizes) * 2)
    names = list(dict.fromkeys(name for w in args.workload for name in loaders_for(w)))
    resume_total = 0 if args.no_resume else len(resume_workers) * (1 + len(positions)) * 3
    runs = sum(len(loaders_for(w)) for w in args.workload) * len(configs) * rounds
    runs += len(args.workload) * sum(1 for w, _, _ in configs if w) * rounds  # threads
    threads = any(w for w, _, _ in configs)
    if threads:
        names.append(THREADS)
        notes.append(
            f"{THREADS}: worker_method='thread', run where num_workers > 0 and timed with the "
            f"global-RNG check off (reseed_global_rng=False); a dataset that draws from a global "
            f"RNG (the synthetic workload draws from numpy's, as an unmodified dataset does) is "
            f"not exact in threads, and the advice says so; '{THREAD_RATIO}' is the median of "
            f"the per-round ratios (docs/threads.md)"
        )
    progress = Progress(runs + resume_total, enabled=not args.no_progress)
    throughput: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="seekdata-bench-") as scratch:
            for name in args.workload:
                dataset = workload(name, n, args, notes, pathlib.Path(scratch))
                warmup = args.warmup if args.warmup is not None else (1 if quick else None)
                throughput += sweep(name, dataset, configs, batches=batches, rounds=rounds,
                                    warmup=warmup, device=device, progress=progress)  # fmt: skip
                del dataset
        resume: list[dict[str, Any]] = []
        state: list[dict[str, Any]] = []
        if not args.no_resume:
            resume, state = resume_sweep(
                resume_n,
                positions,
                batch_sizes[0],
                resume_workers,
                repeats=3 if quick else 5,
                replay_limit_s=20.0,
                budget_s=2.0 if quick else 10.0,
                progress=progress,
            )
    finally:
        progress.close()
    print(
        "steady-state samples/s after warm-up (median of rounds in random order; ratios: median "
        "of the per-round ratios; seekdata reseeds global RNG per sample, or per batch for a "
        "batched read, so DataLoader + reseed reseeds the same generators as often)"
    )
    cols = ["workload", "num_workers", "batch_size", "pin_memory", *names]
    ratios = [*RATIOS, "torchdata / DataLoader"]
    ratios += ["grain / DataLoader"] if "grain" in names else []
    print(table(throughput, [*cols, *ratios, *([THREAD_RATIO] if threads else [])]))
    if threads:
        print("\nwhich workers to pick: worker_method='thread' or 'multiprocessing' (the rule: "
              "threads when they are at least as fast, or within noise and the dataset is "
              "large to copy; docs/threads.md)")  # fmt: skip
        for row in throughput:
            if PICK in row:
                print(f"  {row['workload']}, num_workers={row['num_workers']}, batch_size="
                      f"{row['batch_size']}, pin_memory={row['pin_memory']}: "
                      f"worker_method='{row[PICK]}': {row['why']}")  # fmt: skip
    print("\nstart-up: iter() -> first batch (ms, median)")
    print(table(throughput, ["workload", "num_workers", "batch_size", "pin_memory",
                             *(f"{name} startup ms" for name in names)]))  # fmt: skip
    if resume:
        print(
            f"\nresume: load_state_dict -> first batch (ms), n = {resume_n}, batch {batch_sizes[0]}"
        )
        print(table(resume_table(resume), ["num_workers", "position", *LOADERS]))
        print("\nstate_dict()")
        print(table(state, ["loader", "num_workers", "state_dict_us", "json_bytes", "json_native"]))
    for note in notes:
        print(f"note: {note}")
    config = {
        "workers": workers,
        "batch_sizes": batch_sizes,
        "pin_memory": pins,
        "shape": list(args.shape),
        "work_us": args.work_us,
        "workload": ",".join(args.workload),
        "loaders": names,
        "batches": batches,
        "rounds": rounds,
        "n": n,
        "device": device,
        "resume_n": resume_n,
        "resume_positions": positions,
        "resume_workers": resume_workers,
        "quick": quick,
    }
    write(args.out, "seekdata bench", None, config=config, throughput=throughput, resume=resume,
          state=state, notes=notes)  # fmt: skip
    if plot:
        draw(args.out.with_suffix(".png"), throughput, resume)
    return 0


_NO_PLOT = (
    "no plot: matplotlib is not installed; the table and the JSON are written without it "
    "(pip install -e '.[bench]' in a clone of seekdata for the plot; pip install 'seekdata[bench]' "
    "once seekdata is on PyPI)"
)


def _can_plot() -> bool:
    try:
        pyplot()
    except ImportError:
        return False
    return True
