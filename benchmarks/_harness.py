"""The benchmarks' shared harness: a thin re-export of :mod:`seekdata.tools.bench`.

The harness lives in the package so that ``seekdata bench`` works from an installed package;
the scripts in this folder import it from here. Every figure in the README, docs or a closing
note comes from a script in this folder.
"""

from __future__ import annotations

import argparse
import pathlib

from seekdata.tools.bench import (
    LOADERS,
    Images,
    Indices,
    MemmapRows,
    Progress,
    Reseeding,
    ReseedingBatches,
    Synthetic,
    TokenWindows,
    arrow_table,
    bar_plot,
    batch_len,
    best_of,
    datasets_available,
    first_batch_s,
    grain_available,
    interleave,
    machine,
    make_loader,
    median,
    peak_rss_mb,
    plot_bars,
    plot_resume,
    pyplot,
    quiet,
    replay_s,
    resume_sweep,
    rss_mb,
    run_loader,
    samples_per_s,
    save,
    script_parser,
    state_cost,
    states_at,
    table,
    wait_workers,
    write,
)

__all__ = [
    "LOADERS",
    "RESULTS",
    "Images",
    "Indices",
    "MemmapRows",
    "Progress",
    "Reseeding",
    "ReseedingBatches",
    "Synthetic",
    "TokenWindows",
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
    "parser",
    "peak_rss_mb",
    "plot_bars",
    "plot_resume",
    "pyplot",
    "quiet",
    "replay_s",
    "resume_sweep",
    "rss_mb",
    "run_loader",
    "samples_per_s",
    "save",
    "state_cost",
    "states_at",
    "table",
    "wait_workers",
    "write",
]

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def parser(description: str, name: str) -> argparse.ArgumentParser:
    """``--out`` (default ``results/<name>.json``) and ``--quick``."""
    return script_parser(description, RESULTS / f"{name}.json")
