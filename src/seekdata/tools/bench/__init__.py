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
import pathlib
import re
from typing import Any

from seekdata import _lazy

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

#: name -> the module of this package that defines it, imported on first use (PEP 562), so
#: that ``seekdata --help`` and ``seekdata bench --help`` start without importing torch
_WHERE = {
    "LOADERS": "seekdata.tools.bench._harness",
    "Images": "seekdata.tools.bench._workloads",
    "Indices": "seekdata.tools.bench._measure",
    "MemmapRows": "seekdata.tools.bench._workloads",
    "Progress": "seekdata.tools.bench._harness",
    "Reseeding": "seekdata.tools.bench._workloads",
    "ReseedingBatches": "seekdata.tools.bench._workloads",
    "Synthetic": "seekdata.tools.bench._measure",
    "TokenWindows": "seekdata.tools.bench._workloads",
    "arrow_table": "seekdata.tools.bench._workloads",
    "bar_plot": "seekdata.tools.bench._harness",
    "batch_len": "seekdata.tools.bench._measure",
    "best_of": "seekdata.tools.bench._harness",
    "datasets_available": "seekdata.tools.bench._workloads",
    "first_batch_s": "seekdata.tools.bench._measure",
    "grain_available": "seekdata.tools.bench._workloads",
    "interleave": "seekdata.tools.bench._harness",
    "machine": "seekdata.tools.bench._harness",
    "make_loader": "seekdata.tools.bench._measure",
    "median": "seekdata.tools.bench._harness",
    "peak_rss_mb": "seekdata.tools.bench._harness",
    "plot_bars": "seekdata.tools.bench._report",
    "plot_resume": "seekdata.tools.bench._report",
    "pyplot": "seekdata.tools.bench._harness",
    "quiet": "seekdata.tools.bench._harness",
    "replay_s": "seekdata.tools.bench._measure",
    "resume_sweep": "seekdata.tools.bench._measure",
    "rss_mb": "seekdata.tools.bench._harness",
    "run_loader": "seekdata.tools.bench._measure",
    "samples_per_s": "seekdata.tools.bench._measure",
    "save": "seekdata.tools.bench._report",
    "script_parser": "seekdata.tools.bench._harness",
    "state_cost": "seekdata.tools.bench._measure",
    "states_at": "seekdata.tools.bench._measure",
    "table": "seekdata.tools.bench._harness",
    "wait_workers": "seekdata.tools.bench._harness",
    "write": "seekdata.tools.bench._harness",
}


__getattr__, __dir__ = _lazy.exports(__name__, globals(), _WHERE)


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


def _workload_list(text: str) -> list[str]:
    names = text.split(",")
    from seekdata.tools.bench._report import WORKLOADS

    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated workloads among {', '.join(WORKLOADS)}; got {text!r}"
        )
    return list(dict.fromkeys(names))


def _plain(text: str) -> str:
    """reStructuredText as a terminal shows it: ``code`` and :role:`name` as plain words."""
    return re.sub(r"(?::\w+:)?`+([^`]+)`+", r"\1", text)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``bench`` on an argparse ``subparsers``; ``set_defaults(run=run)``."""
    p = subparsers.add_parser(
        "bench",
        help="throughput and resume latency: seekdata vs torch DataLoader vs torchdata",
        description=_plain(__doc__.split("\n\n")[1]) if __doc__ else None,
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
        type=_workload_list,
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
    from seekdata.tools.bench import _sweep

    return _sweep.run(args)
