"""The benchmarks' shared harness: timing, A/B interleaving, tables, JSON, plots, memory.

Every figure in the README, docs or a closing note comes from a script in this folder.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def parser(description: str, name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--out",
        type=pathlib.Path,
        default=RESULTS / f"{name}.json",
        help="JSON results file (a PNG plot is written beside it)",
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


def interleave(cases: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run each case once per round, in A B A B order, so drift hits every case alike.

    Each case returns its own measurement (e.g. samples/s). Returns all measurements.
    """
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            out[name].append(fn())
    return out


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
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    import numpy
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def write(out: pathlib.Path, name: str, rows: list[dict[str, Any]], **extra: Any) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), "rows": rows, **extra}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"\nwrote {out}")


def bar_plot(
    out: pathlib.Path,
    title: str,
    labels: list[str],
    values: list[float],
    unit: str,
    log: bool = False,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
