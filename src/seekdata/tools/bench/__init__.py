"""``seekdata bench``: throughput and resume latency, seekdata next to torch and torchdata.

The command sweeps ``num_workers``, batch size and ``pin_memory`` over map-style workloads (by
default a synthetic per-sample dataset and a batched read: a Hugging Face ``datasets`` Arrow table
when ``datasets`` is installed, else float rows in a numpy memmap, both read a batch per
``__getitems__`` call) and runs seekdata's ``StatefulDataLoader``, torch's ``DataLoader`` and
torchdata's ``StatefulDataLoader`` in interleaved rounds, each in a new random order, so that
drift of the machine hits each alike. With CUDA, each batch is also moved with
``.to("cuda", non_blocking=True)``. It then times ``load_state_dict`` -> first batch against
the position resumed from (torch's DataLoader: iterate and discard the consumed batches), and
the cost and size of ``state_dict()``. Table on stdout, progress bar on stderr, JSON and a PNG
plot at ``--out`` (the plot needs matplotlib, the ``bench`` extra; without it the command says
so first and writes the rest).

The module is also the harness of the scripts in ``benchmarks/`` (timing, interleaving, tables,
JSON, plots), so the figures in the docs and ``seekdata bench`` share one implementation.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import tempfile
from typing import Any

import torch
import torch.utils.data

from seekdata.tools.bench._harness import (
    LOADERS,
    Progress,
    bar_plot,
    best_of,
    interleave,
    machine,
    median,
    peak_rss_mb,
    pyplot,
    quiet,
    rss_mb,
    script_parser,
    table,
    wait_workers,
    write,
)
from seekdata.tools.bench._measure import (
    Indices,
    Synthetic,
    batch_len,
    first_batch_s,
    make_loader,
    replay_s,
    resume_sweep,
    run_loader,
    samples_per_s,
    state_cost,
    states_at,
)
from seekdata.tools.bench._report import (
    RATIOS,
    WORKLOADS,
    loaders_for,
    plot_bars,
    plot_resume,
    resume_table,
    save,
    sweep,
    workload,
)
from seekdata.tools.bench._report import plot as draw
from seekdata.tools.bench._workloads import (
    Images,
    MemmapRows,
    Reseeding,
    ReseedingBatches,
    TokenWindows,
    arrow_table,
    datasets_available,
    grain_available,
)

__all__ = [
    "LOADERS",
    "Images",
    "Indices",
    "MemmapRows",
    "Progress",
    "Reseeding",
    "ReseedingBatches",
    "Synthetic",
    "TokenWindows",
    "add_parser",
    "arrow_table",
    "bar_plot",
    "batch_len",
    "best_of",
    "datasets_available",
    "first_batch_s",
    "grain_available",
    "interleave",
    "machine",
    "make_loader",
    "median",
    "peak_rss_mb",
    "plot_bars",
    "plot_resume",
    "pyplot",
    "quiet",
    "replay_s",
    "resume_sweep",
    "rss_mb",
    "run",
    "run_loader",
    "samples_per_s",
    "save",
    "script_parser",
    "state_cost",
    "states_at",
    "table",
    "wait_workers",
    "write",
]

# --- the command --------------------------------------------------------------------------------


def _ints(text: str, minimum: int) -> list[int]:
    """Comma-separated integers >= ``minimum``; ``1e6`` is accepted for 1000000."""
    values = []
    for piece in text.split(","):
        try:
            value = float(piece)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and value >= minimum and value == int(value)):
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers >= {minimum}; got {text!r}"
            )
        values.append(int(value))
    return values


def _counts(text: str) -> list[int]:
    return _ints(text, 0)


def _sizes(text: str) -> list[int]:
    return _ints(text, 1)


def _positive(text: str) -> int:
    return _ints(text, 1)[0]


def _workloads(text: str) -> list[str]:
    names = text.split(",")
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated workloads among {', '.join(WORKLOADS)}; got {text!r}"
        )
    return list(dict.fromkeys(names))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on an argparse ``subparsers``; ``set_defaults(run=run)``."""
    p = subparsers.add_parser(
        "bench",
        help="throughput and resume latency: seekdata vs torch DataLoader vs torchdata",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument(
        "--workers",
        type=_counts,
        metavar="LIST",
        help="num_workers to sweep, e.g. 0,2,8 (default: 0,1,2,4,8,16 up to the CPU count)",
    )
    p.add_argument(
        "--batch-sizes", type=_sizes, metavar="LIST", help="batch sizes (default: 32,256)"
    )
    p.add_argument(
        "--pin-memory",
        choices=("both", "on", "off"),
        default="both",
        help="pin_memory settings to sweep (on needs CUDA; default: both)",
    )
    p.add_argument(
        "--shape", type=_sizes, default=[3, 32, 32], metavar="DIMS", help="sample shape (3,32,32)"
    )
    p.add_argument(
        "--work-us", type=float, default=0.0, help="busy work per sample in µs (default 0)"
    )
    p.add_argument(
        "--workload",
        type=_workloads,
        default=["synthetic", "batched"],
        metavar="LIST",
        help="comma-separated, of: synthetic (--shape, --work-us), tokens (2048 token ids), "
        "image (JPEG decode, RandomResizedCrop, flip, normalise; torchvision when installed), "
        "batched (rows read a batch per __getitems__ call: an Arrow table with the datasets "
        "package, else a numpy memmap); default synthetic,batched",
    )
    p.add_argument("--batches", type=_positive, help="timed batches per run (default 100)")
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed batches after the first (default 5+4w)"
    )
    p.add_argument("--rounds", type=_positive, help="interleaved rounds (default 3)")
    p.add_argument(
        "--resume-positions",
        type=_sizes,
        metavar="LIST",
        help="positions to resume from, in samples (default: 1e3,1e5,1e6)",
    )
    p.add_argument("--resume-n", type=_positive, help="dataset length for resume (default 1e7)")
    p.add_argument("--no-resume", action="store_true", help="skip the resume measurements")
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path("seekdata-bench.json"),
        help="JSON results (a PNG is written beside it; default ./seekdata-bench.json)",
    )
    p.add_argument("--quick", action="store_true", help="a CI-sized run: a few seconds")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=run)
    return p


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
    print(table(throughput, [*cols, *ratios]))
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
    "(pip install 'seekdata[bench]' for the plot)"
)


def _can_plot() -> bool:
    try:
        pyplot()
    except ImportError:
        return False
    return True
