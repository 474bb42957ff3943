"""The benchmarks' shared harness: timing, interleaving, tables, JSON, plots, progress."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import pathlib
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

LOADERS = ("seekdata", "DataLoader", "torchdata")
_QUIET = (
    "'set_vital' is deprecated",  # torchdata 0.11, on every iter()
    "This DataLoader will create",  # torch, when --workers asks for more than the CPU count
)

# --- harness ------------------------------------------------------------------------------------


def script_parser(description: str, out: pathlib.Path) -> argparse.ArgumentParser:
    """The parser every benchmark script starts from: ``--out`` and ``--quick``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--out", type=pathlib.Path, default=out, help="JSON results file (a PNG is written beside)"
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    return p


def best_of(fn: Callable[[], Any], repeat: int = 5, number: int = 1) -> float:
    """Best wall time of ``repeat`` runs of ``number`` calls, per call, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def interleave(
    cases: dict[str, Callable[[], Any]], rounds: int, seed: int = 0
) -> dict[str, list[Any]]:
    """Run each case once per round, in a new random order every round (a fixed order A B C
    favours a position: the case after one that leaves workers behind runs slower), so that
    drift of the machine hits every case alike. After each case, wait until the worker
    processes it started have exited, so no run pays for the previous run's shutdown.

    Each case returns its own measurement (e.g. samples/s). Returns all measurements; the
    order is a pure function of ``seed``, so a run can be repeated.
    """
    out: dict[str, list[Any]] = {name: [] for name in cases}
    order = list(cases)
    shuffler = random.Random(seed)  # the benchmark's own stream: never the global one
    for _ in range(rounds):
        shuffler.shuffle(order)
        for name in order:
            out[name].append(cases[name]())
            wait_workers()
    return out


def wait_workers(timeout_s: float = 60.0) -> None:
    """Block until this process has no live child processes (a loader's workers), up to
    ``timeout_s``: collect garbage first, so a deleted iterator shuts its workers down."""
    gc.collect()
    deadline = time.perf_counter() + timeout_s
    while multiprocessing.active_children() and time.perf_counter() < deadline:
        time.sleep(0.005)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def peak_rss_mb() -> float:
    """Peak resident set size of this process (VmHWM), in MB."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _commit() -> str | None:
    """``git describe --always --dirty`` of the checkout this module runs from, if any."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine() -> dict[str, Any]:
    import torchdata

    return {
        "seekdata_commit": _commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchdata": torchdata.__version__,
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def write(out: pathlib.Path, name: str, rows: list[dict[str, Any]] | None, **extra: Any) -> None:
    """Write ``{"benchmark", "machine", "rows"?, **extra}`` as JSON to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), **({"rows": rows} if rows else {}), **extra}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"\nwrote {out}")


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_plot(
    out: pathlib.Path,
    title: str,
    labels: list[str],
    values: list[float],
    unit: str,
    log: bool = False,
) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(labels)))
    ax.barh(labels, values, color="#3a7bd5")
    ax.set_xlabel(unit)
    ax.set_title(title)
    if log:
        ax.set_xscale("log")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    plt.close(fig)
    print(f"wrote {out.with_suffix('.png')}")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the warnings torch and torchdata give on every loader, which a run cannot act on."""
    with warnings.catch_warnings():
        for message in _QUIET:
            warnings.filterwarnings("ignore", message=message)
        yield


class Progress:
    """A tqdm bar on stderr when tqdm is installed and ``enabled``; otherwise nothing."""

    def __init__(self, total: int, enabled: bool = True, unit: str = "run") -> None:
        self.bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is optional: no bar
                return
            self.bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)

    def step(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_description(what, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
