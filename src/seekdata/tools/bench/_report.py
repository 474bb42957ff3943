"""``seekdata bench``'s workloads by name, its throughput sweep, and its plots (which the
scripts in ``benchmarks/`` draw with too)."""

from __future__ import annotations

import argparse
import math
import pathlib
import pickle
from collections.abc import Callable
from typing import Any

from seekdata.tools.bench._harness import LOADERS, Progress, interleave, median, pyplot
from seekdata.tools.bench._measure import Synthetic, make_loader, run_loader
from seekdata.tools.bench._workloads import (
    Images,
    MemmapRows,
    TokenWindows,
    arrow_table,
    datasets_available,
    grain_available,
)

#: ``--workload`` names; ``batched`` is an Arrow table (``datasets``) or a numpy memmap of rows
WORKLOADS = ("synthetic", "tokens", "image", "batched")
#: the two ratios of seekdata: to the loader that reseeds as it does, and to torch's plain one
RATIOS = ("seekdata / DataLoader", "seekdata / DataLoader + reseed")
#: seekdata with thread workers (``worker_method="thread"``), run beside its process workers
#: wherever ``num_workers > 0``
THREADS = "seekdata threads"
#: threads over processes, the median of the per-round ratios, and the column of the advice
THREAD_RATIO = "threads / processes"
PICK = "pick"
#: a dataset whose pickle is at least this large is "large to copy": each process worker holds
#: a copy (forked, or unpickled at every epoch without persistent workers); threads share one
LARGE_COPY = 64 * 2**20


def copy_bytes(dataset: Any) -> int | None:
    """What a process worker copies of ``dataset``: its pickle's size in bytes (None: it does
    not pickle, so it can only reach worker processes by fork)."""
    try:
        return len(pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # any pickling failure: lambdas, open files, locks
        return None


def draws_global_rng(dataset: Any, batch_size: int) -> bool:
    """Whether ``dataset`` draws from torch's, numpy's or ``random``'s global RNG in a thread
    worker: two batches under the loader's check (``RngWatch``), which refuses such a draw."""
    loader = make_loader("seekdata threads", dataset, batch_size, 1, reseed_global_rng=True)
    it = iter(loader)
    try:
        next(it)
        next(it)
    except RuntimeError as e:
        if "global RNG" not in str(e):
            raise
        return True
    finally:
        del it
    return False


def pick_workers(
    ratios: list[float], size: int | None, global_draws: bool = False
) -> tuple[str, str]:
    """Which workers to use, and why, from the per-round ratios of threads' samples/s to
    processes' (``size``: :func:`copy_bytes`). Processes when the dataset draws from a global
    RNG (not exact in threads); else threads when they are at least as fast (the median ratio
    >= 1), or within noise (some round >= 1) and the dataset is large to copy (>=
    :data:`LARGE_COPY`, or it does not pickle); processes otherwise."""
    mid, low, high = median(ratios), min(ratios), max(ratios)
    spread = f"rounds {low:.2f}-{high:.2f}x"
    copied = "does not pickle" if size is None else f"pickles to {size / 2**20:,.1f} MiB"
    if global_draws:
        return "multiprocessing", (
            f"the dataset draws from a global RNG, which threads share, so its batches would "
            f"not be exact in threads (threads ran {mid:.2f}x processes with the check off); "
            f"draw from seekdata.sample_rng() to use threads"
        )
    if mid >= 1.0:
        return "thread", f"threads are as fast or faster ({mid:.2f}x processes, {spread})"
    large = size is None or size >= LARGE_COPY
    if high >= 1.0 and large:
        return "thread", (
            f"threads {mid:.2f}x processes is within noise ({spread}) and the dataset {copied}, "
            f"a copy per process worker that threads do not make"
        )
    if high >= 1.0:
        return "multiprocessing", (
            f"threads {mid:.2f}x processes is within noise ({spread}) but the dataset {copied}: "
            f"small to copy, so processes lose nothing"
        )
    return "multiprocessing", (
        f"threads are slower in every round ({mid:.2f}x processes, {spread}): the dataset's "
        f"work holds the GIL (pure-Python __getitem__), which processes do not share"
    )


def workload(
    name: str, n: int, args: argparse.Namespace, notes: list[str], scratch: pathlib.Path
) -> Any:
    """The dataset of workload ``name`` (``n`` samples at least); ``scratch`` holds its files."""
    if name == "tokens":
        return TokenWindows(max(n, 2**20))
    if name == "image":
        dataset = Images(max(n, 2**20))
        notes.append(f"image workload on {dataset.backend}")
        return dataset
    if name == "batched":
        if datasets_available():
            notes.append(
                "batched workload: a datasets Arrow table of 64 floats a row, torch format"
            )
            return arrow_table(n)
        notes.append(
            "batched workload: a numpy memmap of 64 float32 a row (pip install datasets for the "
            "Arrow table)"
        )
        return MemmapRows.create(scratch / "rows.f32", n)
    return Synthetic(n, shape=args.shape, work_us=args.work_us, draw="global")


def loaders_for(name: str) -> list[str]:
    """The loaders a workload runs: grain (when installed) reads per sample, so not ``batched``."""
    grain = ["grain"] if grain_available() and name != "batched" else []
    return [*LOADERS, "DataLoader + reseed", *grain]


def sweep(
    name: str,
    dataset: Any,
    configs: list[tuple[int, int, bool]],
    *,
    batches: int,
    rounds: int,
    warmup: int | None,
    device: str | None,
    progress: Progress,
) -> list[dict[str, Any]]:
    """One row per (workers, batch size, pin_memory) of ``configs``: each loader's median
    samples/s and start-up, and the median of its per-round ratios to its baselines."""
    threads = any(nw for nw, _, _ in configs)
    size = copy_bytes(dataset) if threads else None
    global_draws = threads and draws_global_rng(dataset, configs[0][1])
    out = []
    for nw, bs, pin in configs:
        names = loaders_for(name) + ([THREADS] if nw else [])
        warm = warmup if warmup is not None else 5 + 4 * nw

        def case(
            loader: str, nw: int = nw, bs: int = bs, pin: bool = pin, warm: int = warm
        ) -> Callable[[], Any]:
            def measure() -> Any:
                pinned = pin and loader != "grain"  # grain pins nothing
                # threads: timed with the global-RNG check off (draws_global_rng decided it)
                reseed = loader != THREADS
                made = make_loader(loader, dataset, bs, nw, pin_memory=pinned,
                                   reseed_global_rng=reseed)  # fmt: skip
                value = run_loader(made, batches, warm, device)
                progress.step(f"{name} {loader} w{nw} b{bs}")
                return value

            return measure

        results = interleave({loader: case(loader) for loader in names}, rounds)
        row: dict[str, Any] = {"workload": name, "num_workers": nw, "batch_size": bs}
        row["pin_memory"] = pin
        rates = {loader: [r["samples_s"] for r in results[loader]] for loader in names}
        for loader in names:
            row[loader] = median(rates[loader])
            row[f"{loader} startup ms"] = 1e3 * median([r["startup_s"] for r in results[loader]])
            for base in ("DataLoader", "DataLoader + reseed"):  # paired within a round
                ratios = [a / b for a, b in zip(rates[loader], rates[base], strict=True)]
                if base == "DataLoader" or loader == "seekdata":
                    row[f"{loader} / {base}"] = median(ratios)
        if nw:  # threads beside processes, paired within a round, and the advice
            paired = [a / b for a, b in zip(rates[THREADS], rates["seekdata"], strict=True)]
            row[THREAD_RATIO] = median(paired)
            row[f"{THREAD_RATIO} rounds"] = paired
            row["copy_bytes"], row["global_rng"] = size, global_draws
            row[PICK], row["why"] = pick_workers(paired, size, global_draws)
        out.append(row)
    return out


def resume_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workers, position), one column per loader; extrapolations marked ``~``."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["num_workers"], r["position"])
        row = out.setdefault(key, {"num_workers": key[0], "position": key[1] or "0 (fresh)"})
        row[r["loader"]] = ("~" if r["extrapolated"] else "") + f"{r['ms']:,.4g}"
    return list(out.values())


def plot(out: pathlib.Path, throughput: list[dict[str, Any]], resume: list[dict[str, Any]]) -> None:
    """Throughput (each loader its own colour), seekdata's two ratios, and resume latency."""
    plt = pyplot()
    panels = 3 if resume else 2
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.8))
    groups = [
        f"{r['workload']}\nw{r['num_workers']} b{r['batch_size']}"
        + (" pin" if r["pin_memory"] else "")
        for r in throughput
    ]
    names = list(
        dict.fromkeys(
            k
            for r in throughput
            for k in r
            if k in (*LOADERS, THREADS, "DataLoader + reseed", "grain")
        )
    )
    series = {name: [r.get(name, math.nan) for r in throughput] for name in names}
    plot_bars(axes[0], groups, series, "samples/s")
    axes[0].set_title("throughput (median of rounds in random order)")
    ratios = {name: [r[name] for r in throughput] for name in RATIOS}
    plot_bars(axes[1], groups, ratios, "samples/s ÷ baseline's (median of per-round ratios)")
    axes[1].axhline(1.0, color="#7f7f7f", lw=1)
    axes[1].axhline(0.95, color="#7f7f7f", lw=1, ls=":")
    top = max((v for values in ratios.values() for v in values), default=1.0)
    axes[1].set_ylim(0, max(1.25, top + 0.25))
    axes[1].set_title("seekdata ÷ DataLoader, and ÷ DataLoader + reseed (dotted: 0.95)")
    if resume:
        plot_resume(axes[2], resume, legend_outside=True)
        axes[2].set_title("resume latency")
    save(fig, out)


# --- plots --------------------------------------------------------------------------------------

#: one colour per loader (plot_bars falls back on the palette for other names)
_COLORS = {
    "seekdata": "#3a7bd5",
    "DataLoader": "#7f7f7f",
    "DataLoader + reseed": "#2f2f2f",
    "torchdata": "#e8833a",
    "grain": "#6aa84f",
    THREADS: "#7fb3f0",
}
_PALETTE = ("#8e63b5", "#c9473e", "#2aa198", "#b58900", "#d33682")


def plot_resume(ax: Any, rows: list[dict[str, Any]], legend_outside: bool = False) -> None:
    """Latency against position, log-log. Extrapolated points are hollow, on a dotted line; a
    fresh start (position 0) is a thin dotted horizontal line."""
    styles = ["-", "--", "-.", ":"]
    workers = sorted({r["num_workers"] for r in rows})
    for name in LOADERS:
        color = _COLORS[name]
        for i, nw in enumerate(workers):
            label = name if len(workers) == 1 else f"{name}, workers={nw}"
            pts = [r for r in rows if r["loader"] == name and r["num_workers"] == nw]
            for r in pts:
                if r["position"] == 0:
                    ax.axhline(r["ms"], color=color, lw=0.8, ls=":", alpha=0.7)
            real = [
                (r["position"], r["ms"]) for r in pts if r["position"] and not r["extrapolated"]
            ]
            guess = [(r["position"], r["ms"]) for r in pts if r["position"] and r["extrapolated"]]
            if real:
                ax.plot(
                    *zip(*real, strict=True), styles[i % 4], marker="o", color=color, label=label
                )
            if guess:
                ax.plot(*zip(*real[-1:], *guess, strict=True), ":", color=color)
                ax.plot(*zip(*guess, strict=True), "o", mfc="white", color=color,
                        label=f"{label} (extrapolated)")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("position resumed from (samples)")
    ax.set_ylabel("load_state_dict -> first batch (ms)")
    ax.grid(True, which="major", alpha=0.3)
    where = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0)} if legend_outside else {}
    ax.legend(fontsize=7, title="dotted horizontal: fresh start", title_fontsize=7, **where)


def plot_bars(
    ax: Any,
    groups: list[str],
    series: dict[str, list[float]],
    ylabel: str,
    colors: dict[str, str] | None = None,
) -> None:
    """Grouped bars: one group per configuration, one bar per series, each series its own
    colour (``colors`` by series name, else the loader's, else the next of a palette)."""
    width = 0.8 / max(len(series), 1)
    spare = iter(_PALETTE * len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        color = (colors or {}).get(name) or _COLORS.get(name) or next(spare)
        ax.bar(xs, values, width, label=name, color=color)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def save(fig: Any, out: pathlib.Path) -> None:
    plt = pyplot()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")
