"""Throughput: seekdata's StatefulDataLoader against torch's DataLoader, torchdata's and Grain's.

    python benchmarks/throughput.py              # workers 0 and 2: results/throughput.json + .png
    python benchmarks/throughput.py --quick      # a smoke run
    python benchmarks/throughput.py --workers 16 --pin-memory --device cuda --workloads tokens,image
    python benchmarks/throughput.py --profile    # also: cProfile of seekdata, reseeding on
    python benchmarks/throughput.py --alternate --workloads cheap,tokens   # num_workers=0, blocks
    python benchmarks/throughput.py --replot results/throughput.json       # redraw a JSON's plot

Workloads (one dataset object per workload, the same for every loader; each sample draws from
numpy's or torch's global RNG, as unmodified code does):

- ``tokens``: 2048 token ids (int64) from a shared corpus at an offset drawn from numpy's
  global RNG: a language-model sample, a few µs.
- ``cheap``: a 16-float tensor plus one draw (~2 µs).
- ``50 µs``: the same after a 50 µs busy-wait.
- ``image``: JPEG decode + RandomResizedCrop(224) + horizontal flip + normalise (torchvision
  when installed, else PIL and torch doing the same), ~1 ms.

Loaders, each compared with its baseline in the same round:

- ``seekdata`` (the default ``reseed_global_rng=True``) against ``DataLoader + reseed``: torch's
  DataLoader whose dataset reseeds exactly what seekdata reseeds (torch's CPU generator, numpy's
  and ``random``'s global RNG) before each sample. Goal (issue 14): >= 0.95x.
- ``seekdata torch+numpy``: ``reseed_global_rng=("torch", "numpy")``, against the same.
- ``seekdata reseed off`` against plain ``DataLoader``: the loader's own cost. Goal >= 0.97x.
- ``torchdata`` and ``grain`` (when installed) against plain ``DataLoader``.

Every round runs each loader once, in a new random order, and waits for the previous loader's
workers to exit before the next starts. A run reports its start-up (``iter()`` to the first
batch) apart from its steady state (samples/s over the timed batches, after warm-up batches).
Ratios are the median over rounds of the per-round ratio (paired: drift of the machine cancels
within a round), with the spread of those per-round ratios.

Also ``state_dict()`` cost, and a breakdown of seekdata's per-sample and per-batch costs.
"""

from __future__ import annotations

import cProfile
import functools
import json
import math
import pathlib
import pstats
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H
from seekdata import rng
from seekdata._core import globalrng as _globalrng
from seekdata._core import rngkeys as _rngkeys
from seekdata._core import sample as _sample

BATCH = 32
N = 2**20
#: loader -> the baseline its ratio is taken against
PAIRS = {
    "seekdata": "DataLoader + reseed",
    "seekdata torch+numpy": "DataLoader + reseed",
    "DataLoader + reseed": "DataLoader + reseed",
    "seekdata reseed off": "DataLoader",
    "torchdata": "DataLoader",
    "grain": "DataLoader",
    "DataLoader": "DataLoader",
}
WORKLOADS = ("tokens", "cheap", "50 µs", "image")
#: samples timed per run, per process loading (so a run takes ~0.2-0.5 s)
SAMPLES = {"tokens": 19_200, "cheap": 25_600, "50 µs": 3_200, "image": 320}


def dataset(workload: str) -> Any:
    if workload == "tokens":
        return H.TokenWindows(N)
    if workload == "image":
        return H.Images(N)
    return H.Synthetic(N, shape=(16,), work_us=50.0 if workload == "50 µs" else 0.0, draw="global")


def loader(kind: str, data: Any, workers: int, pin: bool) -> Any:
    reseed: Any = {"seekdata": True, "seekdata torch+numpy": ("torch", "numpy")}.get(kind, False)
    name = "seekdata" if kind.startswith("seekdata") else kind
    return H.make_loader(name, data, BATCH, workers, reseed_global_rng=reseed, pin_memory=pin)


def run_case(kind: str, data: Any, workers: int, args: Any, progress: H.Progress) -> dict:
    batches = max(int(SAMPLES[args.workload_now] * max(1, workers) * args.scale) // BATCH, 10)
    warmup = 5 + 4 * workers  # drains what the workers prefetched during start-up
    pin = args.pin_memory and kind != "grain"
    try:
        made = loader(kind, data, workers, pin)
        result = H.run_loader(made, batches, warmup, args.device, max_s=3.0)
    except Exception as exc:  # an optional anchor must not sink the run
        if kind != "grain":
            raise
        print(f"grain failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        result = {"startup_s": math.nan, "samples_s": math.nan}
    progress.step(f"{kind} | {args.workload_now} | w{workers}")
    return result


def alternate(workload: str, data: Any, kinds: list[str], args: Any) -> list[dict]:
    """``num_workers=0`` only: every loader's iterator open at once, timed in alternating blocks
    of ``args.block`` batches, in a new random order each cycle. A single process's speed on a
    shared VM swings 2x within seconds; blocks a few ms apart see the same machine, so the
    ratio of two loaders' summed block times is steadier than whole runs seconds apart."""
    iters = {kind: iter(loader(kind, data, 0, False)) for kind in kinds}
    for it in iters.values():
        for _ in range(10):  # first batches: epoch set-up, caches
            next(it)
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.cycles):
        for kind in random.sample(kinds, len(kinds)):
            it, t0 = iters[kind], time.perf_counter()
            for _ in range(args.block):
                next(it)
            seconds[kind].append(time.perf_counter() - t0)
    rows = []
    for kind in kinds:
        base = PAIRS[kind]
        if base not in seconds:
            continue
        per_cycle = [b / a for a, b in zip(seconds[kind], seconds[base], strict=True)]
        per_cycle.sort()
        q = len(per_cycle) // 4
        rows.append(
            {
                "workload": workload,
                "loader": kind,
                "samples_s": args.cycles * args.block * BATCH / sum(seconds[kind]),
                "vs": base,
                "ratio": sum(seconds[base]) / sum(seconds[kind]),
                "cycle ratios IQR": f"{per_cycle[q]:.3f}-{per_cycle[-q - 1]:.3f}",
                "extra us/batch": 1e6
                * (sum(seconds[kind]) - sum(seconds[base]))
                / (args.cycles * args.block),
            }
        )
    return rows


def breakdown() -> list[dict]:
    """µs of each piece of seekdata's fetch path (best of 7), for reading the overheads."""
    seeds = rng.global_seeds(0, 0, np.arange(BATCH)).tolist()
    indices = tuple(range(10_000, 10_000 + BATCH))
    everything = _globalrng.GENERATORS
    saved = _globalrng.save(everything)

    def sample_rng_draw() -> None:
        _sample.enter_sample(0, 0, 12345, None)
        rng.sample_rng().random()

    cases: dict[str, tuple[Callable[[], object], str]] = {
        "enter_sample with reseed (3 global seeds)": (
            lambda: _sample.enter_sample(0, 0, 5, seeds[5]),
            "sample",
        ),
        "  torch.default_generator.manual_seed": (
            lambda: torch.default_generator.manual_seed(seeds[5][0]),
            "sample",
        ),
        "  np.random.seed": (lambda: np.random.seed(seeds[5][1]), "sample"),
        "  random's seed, as the loader calls it": (
            lambda: _globalrng.SEEDERS["random"](seeds[5][2]),
            "sample",
        ),
        "random.seed (with its Python wrapper)": (lambda: random.seed(seeds[5][2]), "sample"),
        "enter_sample without reseed": (lambda: _sample.enter_sample(0, 0, 5, None), "sample"),
        "enter_sample + sample_rng() + one draw": (sample_rng_draw, "sample"),
        "np.random.random() (the global draw)": (np.random.random, "sample"),
        "seed_columns(32 indices): the batch's seeds": (
            lambda: _rngkeys.seed_columns(0, 0, indices),
            "batch",
        ),
        "save the caller's 3 generators (num_workers=0)": (
            lambda: _globalrng.save(everything),
            "batch",
        ),
        "restore them (num_workers=0)": (lambda: _globalrng.restore(saved), "batch"),
        "  np.random.get_state(), which the save replaces": (np.random.get_state, "batch"),
        "  random.getstate(), which the save replaces": (random.getstate, "batch"),
    }
    rows = []
    for name, (fn, per) in cases.items():
        us = 1e6 * H.best_of(fn, repeat=7, number=2000)
        rows.append(
            {
                "piece": name,
                "per": per,
                "us": us,
                "us_per_sample": us / (BATCH if per == "batch" else 1),
            }
        )
    _globalrng.restore(saved)
    return rows


def profile() -> None:
    data = H.TokenWindows(N)
    it = iter(H.make_loader("seekdata", data, BATCH, 0))
    next(it)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        next(it)
    prof.disable()
    print("\ncProfile, seekdata reseeding on, tokens, num_workers=0, 2000 batches (own time):")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(16)


def _list(text: str) -> list[str]:
    return [piece.strip() for piece in text.split(",") if piece.strip()]


def main() -> None:
    p = H.parser(__doc__ or "", "throughput")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9)")
    p.add_argument("--workers", type=str, default="0,2", help="num_workers list (default 0,2)")
    p.add_argument("--workloads", type=str, default=",".join(WORKLOADS), help="workload list")
    p.add_argument("--loaders", type=str, default=None, help="loader list (default: all)")
    p.add_argument("--pin-memory", action="store_true", help="pin_memory=True (needs CUDA)")
    p.add_argument("--device", default=None, help='move each batch there, e.g. "cuda"')
    p.add_argument("--profile", action="store_true", help="also print a cProfile of seekdata")
    p.add_argument("--scale", type=float, default=None, help="x samples timed per run (1)")
    p.add_argument("--only-throughput", action="store_true", help="skip state and breakdown")
    p.add_argument(
        "--alternate",
        action="store_true",
        help="num_workers=0 only: loaders timed in alternating blocks (see alternate)",
    )
    p.add_argument("--cycles", type=int, default=200, help="--alternate: cycles (200)")
    p.add_argument("--block", type=int, default=10, help="--alternate: batches a block (10)")
    p.add_argument(
        "--replot",
        type=pathlib.Path,
        default=None,
        help="redraw the plot of a JSON this script wrote (e.g. on another machine)",
    )
    args = p.parse_args()
    if args.replot is not None:
        written = json.loads(args.replot.read_text())
        draw = plot if "num_workers" in written["rows"][0] else plot_alternate
        draw(args.replot.with_suffix(".png"), written["rows"])
        return
    torch.set_num_threads(1)  # one intra-op thread: the loaders, not torch, are measured
    rounds = args.rounds or (2 if args.quick else 9)
    args.scale = args.scale or (0.1 if args.quick else 1.0)
    workers_list = [int(w) for w in _list(args.workers)]
    workloads = _list(args.workloads)
    kinds = _list(args.loaders) if args.loaders else [
        k for k in PAIRS if k != "grain" or H.grain_available()
    ]  # fmt: skip
    for needed in {PAIRS[k] for k in kinds}:
        if needed not in kinds:
            kinds.append(needed)
    if args.alternate:
        rows = [row for w in workloads for row in alternate(w, dataset(w), kinds, args)]
        print(f"num_workers=0, batch {BATCH}, {args.cycles} cycles of {args.block}-batch blocks "
              "in random order; ratio: the baseline's summed time ÷ the loader's")  # fmt: skip
        print(H.table(rows, ["workload", "loader", "samples_s", "vs", "ratio",
                             "cycle ratios IQR", "extra us/batch"]))  # fmt: skip
        out = args.out.with_name("throughput_alternate.json")
        H.write(out, "throughput", rows, batch_size=BATCH, cycles=args.cycles, block=args.block,
                mode="alternate")  # fmt: skip
        plot_alternate(out.with_suffix(".png"), rows)
        return
    progress = H.Progress(len(workloads) * len(workers_list) * rounds * len(kinds))
    rows = []
    try:
        for workload in workloads:
            data = dataset(workload)
            for workers in workers_list:
                args.workload_now = workload
                cases = {
                    kind: functools.partial(run_case, kind, data, workers, args, progress)
                    for kind in kinds
                }
                results = H.interleave(cases, rounds)
                rows += summarise(workload, workers, results)
    finally:
        progress.close()
    print(f"batch {BATCH}, {rounds} rounds in random order; steady-state samples/s (median); "
          "ratio to the baseline: median of per-round ratios [min-max]")  # fmt: skip
    print(H.table(rows, ["workload", "num_workers", "loader", "samples_s", "vs", "ratio",
                         "spread", "extra us/sample", "startup_ms"]))  # fmt: skip
    costs: list[dict] = []
    pieces: list[dict] = []
    if not args.only_throughput:
        costs, pieces = extras()
    H.write(args.out, "throughput", rows, state=costs, breakdown=pieces, batch_size=BATCH,
            rounds=rounds, workers=workers_list, pin_memory=args.pin_memory, device=args.device,
            image_backend=H.Images(1, distinct=1).backend)  # fmt: skip
    plot(args.out.with_suffix(".png"), rows)
    if args.profile:
        profile()


def extras() -> tuple[list[dict], list[dict]]:
    """The state_dict() cost table and the fetch path's breakdown, printed and returned."""
    costs = []
    for workers in (0, 2):
        for name in ("seekdata", "torchdata"):
            row: dict[str, Any] = {"loader": name, "num_workers": workers}
            row.update(H.state_cost(H.make_loader(name, H.Indices(N), BATCH, workers)))
            costs.append(row)
            H.wait_workers()
    print("\nstate_dict(): µs per call (best of 5 x 200), bytes of json.dumps (tensors as lists)")
    print(H.table(costs, ["loader", "num_workers", "state_dict_us", "json_bytes", "json_native"]))
    pieces = breakdown()
    print("\nseekdata's fetch path, piece by piece (µs, best of 7 x 2000)")
    print(H.table(pieces, ["piece", "per", "us", "us_per_sample"]))
    return costs, pieces


def summarise(workload: str, workers: int, results: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for kind, runs in results.items():
        base = results[PAIRS[kind]]
        rates = [r["samples_s"] for r in runs]
        pairs = list(zip(rates, [r["samples_s"] for r in base], strict=True))
        ratios = [a / b for a, b in pairs]
        rows.append(
            {
                "workload": workload,
                "num_workers": workers,
                "loader": kind,
                "samples_s": H.median(rates),
                "vs": PAIRS[kind],
                "ratio": H.median(ratios),
                "spread": f"{min(ratios):.2f}-{max(ratios):.2f}",
                "extra us/sample": H.median([1e6 / a - 1e6 / b for a, b in pairs]),
                "startup_ms": 1e3 * H.median([r["startup_s"] for r in runs]),
                "runs": runs,
            }
        )
    return rows


def plot_alternate(out: pathlib.Path, rows: list[dict]) -> None:
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    kinds = [k for k in dict.fromkeys(r["loader"] for r in rows) if PAIRS.get(k) != k]
    series = {
        f"{kind} ÷ {PAIRS[kind]}": [
            next(r["ratio"] for r in rows if r["workload"] == w and r["loader"] == kind)
            for w in workloads
        ]
        for kind in kinds
    }
    fig, ax = H.pyplot().subplots(figsize=(8, 4.4))
    colors = {f"{k} ÷ {PAIRS[k]}": c for k, c in _SHADES.items()}
    H.plot_bars(ax, [f"{w}\nworkers=0" for w in workloads], series,
                "samples/s ÷ baseline's (alternating blocks)", colors)  # fmt: skip
    ax.axhline(1.0, color="#7f7f7f", lw=1)
    ax.axhline(0.95, color="#7f7f7f", lw=1, ls=":")
    top = max((v for values in series.values() for v in values), default=1.0)
    ax.set_ylim(0, max(1.25, top + 0.25))
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax.set_title(f"num_workers=0, loaders timed in alternating blocks (batch {BATCH})")
    H.save(fig, out)


_SHADES = {"seekdata torch+numpy": "#1b4f9c", "grain": "#4caf50"}


def plot(out: pathlib.Path, rows: list[dict]) -> None:
    configs = list(dict.fromkeys((r["workload"], r["num_workers"]) for r in rows))
    groups = [f"{d}\nworkers={w}" for d, w in configs]
    kinds = [k for k in dict.fromkeys(r["loader"] for r in rows) if PAIRS.get(k) != k]
    series = {
        f"{kind} ÷ {PAIRS[kind]}": [
            next(
                (
                    r["ratio"]
                    for r in rows
                    if (r["workload"], r["num_workers"]) == c and r["loader"] == kind
                ),
                math.nan,  # a loader not run in this configuration
            )
            for c in configs
        ]
        for kind in kinds
    }
    fig, ax = H.pyplot().subplots(figsize=(10, 4.8))
    colors = {f"{k} ÷ {PAIRS[k]}": c for k, c in _SHADES.items()}
    H.plot_bars(ax, groups, series, "steady-state samples/s ÷ baseline's (median)", colors)
    ax.axhline(1.0, color="#7f7f7f", lw=1)
    ax.axhline(0.95, color="#7f7f7f", lw=1, ls=":")
    top = max((v for values in series.values() for v in values if v == v), default=1.0)
    ax.set_ylim(0, max(1.25, top + 0.25))
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax.set_title(f"throughput relative to the matching DataLoader (batch {BATCH}; dotted: 0.95)")
    ax.tick_params(axis="x", labelrotation=0)
    H.save(fig, out)


if __name__ == "__main__":
    with H.quiet():
        main()
