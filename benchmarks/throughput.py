"""Throughput: seekdata's StatefulDataLoader vs torch's DataLoader vs torchdata's.

    python benchmarks/throughput.py              # ~6 min on 2 cores; results/throughput.json + .png
    python benchmarks/throughput.py --quick      # a smoke run
    python benchmarks/throughput.py --profile    # also: cProfile of seekdata, reseeding on

Samples/s of a shuffled map-style dataset (a 16-float tensor per sample, batch size 32), for a
cheap ``__getitem__`` and a ~50 µs one (busy-wait), at num_workers 0 and 2. The loaders run in
interleaved rounds (A B C D A B C D ...); each run is timed from its first batch on, so worker
start-up and epoch set-up are not counted. The table gives the median samples/s, and the median
over rounds of the ratio to DataLoader and of the extra µs per sample over DataLoader (each taken
within one round, so drift of the machine cancels).

Each sample draws one random number, as an augmentation would. seekdata runs in two modes:
``reseed_global_rng=True`` (the default: the dataset is unmodified and draws from numpy's global
RNG, which seekdata reseeds per sample, like DataLoader and torchdata's datasets here) and
``reseed_global_rng=False`` (the dataset draws from ``seekdata.sample_rng()`` instead). The
"no draw" dataset draws nothing, which isolates the loader's own machinery.

Also ``state_dict()`` cost, and a breakdown of seekdata's per-sample and per-batch costs.

Goals (issue 7): reseeding off >= 0.97x DataLoader; reseeding on <= 10 µs per sample.
"""

from __future__ import annotations

import cProfile
import functools
import pathlib
import pstats
import random
import sys
from collections.abc import Callable

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H
from seekdata import rng

KINDS = ("seekdata", "seekdata reseed off", "DataLoader", "torchdata")
BATCH = 32
N = 2**20


def loader(kind: str, dataset: str, workers: int) -> object:
    work = 50.0 if dataset.startswith("50") else 0.0
    if dataset.endswith("no draw"):
        draw = None
    else:
        draw = "sample" if kind == "seekdata reseed off" else "global"
    data = H.Synthetic(N, shape=(16,), work_us=work, draw=draw)
    name = "seekdata" if kind.startswith("seekdata") else kind
    return H.make_loader(name, data, BATCH, workers, reseed_global_rng=kind == "seekdata")


def run_case(kind: str, dataset: str, workers: int, batches: int, progress: H.Progress) -> float:
    value = H.samples_per_s(loader(kind, dataset, workers), batches)
    progress.step(f"{kind} | {dataset} | w{workers}")
    return value


def batches_for(dataset: str, workers: int, quick: bool) -> int:
    samples = 6_400 * (1 + workers) if dataset.startswith("50") else 32_000
    return max(samples // BATCH // (10 if quick else 1), 10)


def breakdown() -> list[dict]:
    """µs of each piece of seekdata's fetch path (best of 7), for reading the overheads."""
    seeds = rng.global_seeds(0, 0, np.arange(BATCH)).tolist()
    indices = tuple(range(10_000, 10_000 + BATCH))
    saved = rng.capture_globals()

    def sample_rng_draw() -> None:
        rng.enter_sample(0, 0, 12345, None)
        rng.sample_rng().random()

    py_seed = getattr(rng, "_py_seed", random.seed)  # the loader's C-level random.seed, if any
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "enter_sample with reseed (3 global seeds)": (
            lambda: rng.enter_sample(0, 0, 5, seeds[5]),
            "sample",
        ),
        "  torch.default_generator.manual_seed": (
            lambda: torch.default_generator.manual_seed(seeds[5][0]),
            "sample",
        ),
        "  np.random.seed": (lambda: np.random.seed(seeds[5][1]), "sample"),
        "  random's seed, as the loader calls it": (lambda: py_seed(seeds[5][2]), "sample"),
        "random.seed (with its Python wrapper)": (lambda: random.seed(seeds[5][2]), "sample"),
        "enter_sample without reseed": (lambda: rng.enter_sample(0, 0, 5, None), "sample"),
        "enter_sample + sample_rng() + one draw": (sample_rng_draw, "sample"),
        "np.random.random() (the global draw)": (np.random.random, "sample"),
        "global_seeds(32 indices).tolist()": (
            lambda: rng.global_seeds(0, 0, np.asarray(indices)).tolist(),
            "batch",
        ),
        "capture_globals() (num_workers=0)": (rng.capture_globals, "batch"),
        "restore_globals() (num_workers=0)": (lambda: rng.restore_globals(saved), "batch"),
        "  of which np.random.get_state()": (np.random.get_state, "batch"),
        "  of which np.random.set_state()": (lambda: np.random.set_state(saved[1]), "batch"),
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
    rng.restore_globals(saved)
    return rows


def profile() -> None:
    data = H.Synthetic(N, shape=(16,), draw="global")
    it = iter(H.make_loader("seekdata", data, BATCH, 0))
    next(it)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        next(it)
    prof.disable()
    print("\ncProfile, seekdata reseeding on, num_workers=0, 2000 batches (by own time):")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(14)


def main() -> None:
    p = H.parser(__doc__ or "", "throughput")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 7)")
    p.add_argument("--profile", action="store_true", help="also print a cProfile of seekdata")
    args = p.parse_args()
    torch.set_num_threads(1)  # one intra-op thread: the loaders, not torch, are measured
    rounds = args.rounds or (2 if args.quick else 15)
    datasets = ("cheap, no draw", "cheap", "50 µs, no draw", "50 µs")
    configs = [(d, w) for d in datasets for w in (0, 2)]
    progress = H.Progress(len(configs) * rounds * len(KINDS))
    rows = []
    try:
        for dataset, workers in configs:
            batches = batches_for(dataset, workers, args.quick)
            cases = {
                kind: functools.partial(run_case, kind, dataset, workers, batches, progress)
                for kind in KINDS
            }
            results = H.interleave(cases, rounds)
            base = results["DataLoader"]
            for kind in KINDS:
                runs = results[kind]
                rows.append(
                    {
                        "dataset": dataset,
                        "num_workers": workers,
                        "loader": kind,
                        "samples_s": H.median(runs),
                        "min": min(runs),
                        "max": max(runs),
                        # per-round pairs: drift of the machine cancels within a round
                        "x DataLoader": H.median([a / b for a, b in zip(runs, base, strict=True)]),
                        "extra us/sample": H.median(
                            [1e6 / a - 1e6 / b for a, b in zip(runs, base, strict=True)]
                        ),
                        "runs": runs,
                    }
                )
    finally:
        progress.close()
    print(f"samples/s, batch {BATCH}, {rounds} interleaved rounds (ratios: median of per-round)")
    print(H.table(rows, ["dataset", "num_workers", "loader", "samples_s", "min", "max",
                         "x DataLoader", "extra us/sample"]))  # fmt: skip
    costs = []
    for workers in (0, 2):
        for name in ("seekdata", "torchdata"):
            data = H.Synthetic(N, shape=(16,), draw="global")
            row = {"loader": name, "num_workers": workers}
            row.update(H.state_cost(H.make_loader(name, data, BATCH, workers)))
            costs.append(row)
    print("\nstate_dict(): µs per call (best of 5 x 200), bytes of json.dumps (tensors as lists)")
    print(H.table(costs, ["loader", "num_workers", "state_dict_us", "json_bytes", "json_native"]))
    pieces = breakdown()
    print("\nseekdata's fetch path, piece by piece (µs, best of 7 x 2000)")
    print(H.table(pieces, ["piece", "per", "us", "us_per_sample"]))
    H.write(args.out, "throughput", rows, state=costs, breakdown=pieces, batch_size=BATCH,
            rounds=rounds)  # fmt: skip
    plot(args.out.with_suffix(".png"), rows)
    if args.profile:
        profile()


def plot(out: pathlib.Path, rows: list[dict]) -> None:
    configs = list(dict.fromkeys((r["dataset"], r["num_workers"]) for r in rows))
    groups = [f"{d}\nworkers={w}" for d, w in configs]
    series = {
        kind: [
            next(
                r["x DataLoader"]
                for r in rows
                if (r["dataset"], r["num_workers"]) == c and r["loader"] == kind
            )
            for c in configs
        ]
        for kind in KINDS
        if kind != "DataLoader"
    }
    fig, ax = H.pyplot().subplots(figsize=(9, 4.5))
    H.plot_bars(ax, groups, series, "samples/s ÷ DataLoader's (median)")
    ax.axhline(1.0, color="#7f7f7f", lw=1)
    ax.axhline(0.97, color="#7f7f7f", lw=1, ls=":")
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax.set_title(f"throughput relative to torch's DataLoader (batch {BATCH}; dotted: 0.97)")
    ax.tick_params(axis="x", labelrotation=0)
    H.save(fig, out)


if __name__ == "__main__":
    with H.quiet():
        main()
