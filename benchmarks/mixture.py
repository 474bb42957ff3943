"""Weighted mixtures: seek cost to p = 1e12, memory for K sources, throughput, discrepancy.

    python benchmarks/mixture.py            # prints tables, writes results/mixture.json + .png

- seek: ``Mixture.locate(p)`` and a loader's first batch after ``sampler.seek(p)``, against the
  reference way of reaching position p of a ``ConcatDataset`` + ``WeightedRandomSampler``
  stream (its ``iter()`` draws all p indices with ``torch.multinomial`` first).
- memory: bytes a ``Mixture`` of K sources allocates (tracemalloc), K = 2 ... 1,000.
- throughput: samples/s of ``StatefulDataLoader`` over a 4-source mixture (~50 µs
  ``__getitem__``, global-RNG draws) against torch's ``DataLoader`` over ``ConcatDataset`` +
  ``WeightedRandomSampler``: reseeding on against a baseline dataset that reseeds the same
  generators itself, reseeding off (loader and mixture) against a plain one; also seekdata's
  loader over the ``ConcatDataset`` without mixing (the mixture's own cost), workers 0 and 2.
  ``--only-throughput`` runs this table alone (``--workers 0,2,16`` to choose).
- discrepancy: the largest ``|count_k - weight_k * p|`` over every prefix, realised, against
  the stated ``Mixture.bound`` and against the weighted sampler.
- schedule: ``Mixture.locate(p)`` with a ``schedule=`` of 10 segments (Zipf weights, shuffled
  per segment, 10 % of the sources absent from every third), K = 16 and 1,000, p = 1e6 ...
  1e12 (target: <= 50 us at 1e12 with K = 1,000); the build time, the memory, and the size of
  a loader's JSON state over it. ``--only-schedule`` runs this table alone.
- changes: a mixture changed at resume 10 times with ``Mixture.changed`` (each change new
  Zipf weights, one source added, one removed, one grown), K = 16 and 1,000 to start:
  ``locate(p)`` at p = 1e12 after every change, and the loader's JSON state there, with its
  history of 10 changes (target: <= 4 KB). Printed and written with the schedule table.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
import tracemalloc
from fractions import Fraction
from typing import Any

import numpy as np
import torch.utils.data

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _harness as H
import seekdata


def zipf(k: int) -> list[Fraction]:
    return [Fraction(1, i + 1) for i in range(k)]


def mixture(k: int, n: int = 1000, length: int | None = None, **kw: Any) -> seekdata.Mixture:
    sources = [H.Synthetic(n, draw="global") for _ in range(k)]
    return seekdata.Mixture(sources, zipf(k), length=length, **kw)


def seek_rows(quick: bool) -> list[dict[str, Any]]:
    rows = []
    exponents = (6, 8, 10, 12)
    for k, window in ((2, 0), (16, 0), (16, 64), (1000, 0)):
        mix = mixture(k, length=2 * 10**12, window=window)
        for e in exponents:
            p = 10**e
            per = [H.best_of(lambda q=p + j, m=mix: m.locate(q), repeat=3) for j in range(20)]
            rows.append(
                {
                    "K": k if not window else f"{k}, window {window}",
                    "p": f"1e{e}",
                    "locate (us)": 1e6 * statistics.median(per),
                }
            )
    for e in exponents:  # the loader: sampler.seek(p) -> first batch of 32, K = 16
        mix = mixture(16, length=2 * 10**12)
        sampler = seekdata.DistributedSampler(mix, 1, 0, shuffle=False)
        loader = seekdata.StatefulDataLoader(mix, batch_size=32, sampler=sampler)
        times = []
        for j in range(5):
            t0 = time.perf_counter()
            sampler.seek(10**e + 32 * j)
            next(iter(loader))
            times.append(time.perf_counter() - t0)
        rows.append({"K": 16, "p": f"1e{e}", "first batch (ms)": 1e3 * statistics.median(times)})
    weights = torch.tensor([float(w) for w in zipf(16)], dtype=torch.double)
    for e in (6, 7) if quick else (6, 7, 8):  # 1e8 draws: 800 MB; past that it does not fit
        p = 10**e
        sampler = torch.utils.data.WeightedRandomSampler(weights, p, generator=torch.Generator())
        t0 = time.perf_counter()
        next(iter(sampler))
        rows.append(
            {
                "K": 16,
                "p": f"1e{e}",
                "WeightedRandomSampler to p (ms)": 1e3 * (time.perf_counter() - t0),
            }
        )
    return rows


def memory_rows() -> list[dict[str, Any]]:
    rows = []
    for k in (2, 10, 100, 1000):
        sources = [range(1000) for _ in range(k)]
        weights = zipf(k)
        tracemalloc.start()
        mix = seekdata.Mixture(sources, weights)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rows.append(
            {
                "K": k,
                "retained (KB)": current / 1024,
                "peak while building (KB)": peak / 1024,
                "bytes per source": current / k,
                "stated bound": float(mix.bound),
            }
        )
    return rows


def scheduled(k: int, segments: int = 10, every: int = 10**11) -> seekdata.Mixture:
    """K sources over ``segments`` segments of ``every`` positions: Zipf weights, shuffled in
    each segment, and 10 % of the sources absent (weight 0) from every third segment."""
    r = random.Random(0)
    schedule = []
    for j in range(segments):
        weights: list[Fraction | int] = list(zipf(k))
        r.shuffle(weights)
        if j % 3 == 1:
            for i in r.sample(range(k), k // 10):
                weights[i] = 0
        schedule.append((j * every, weights))
    return seekdata.Mixture([range(1000)] * k, schedule=schedule, length=2 * 10**12)


def schedule_rows(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for k in (16, 1000):
        t0 = time.perf_counter()
        mix = scheduled(k)
        built = time.perf_counter() - t0
        tracemalloc.start()
        kept = scheduled(k)
        retained, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del kept
        loader = seekdata.StatefulDataLoader(mix, batch_size=32)
        state = len(json.dumps(loader.state_dict()))
        for e in (12,) if quick else (6, 9, 12):
            p = 10**e
            per = [
                H.best_of(lambda q=p + j, m=mix: m.locate(q), repeat=3)
                for j in range(5 if quick else 20)
            ]
            rows.append(
                {
                    "K": k,
                    "segments": len(mix.schedule),
                    "p": f"1e{e}",
                    "locate (us)": 1e6 * statistics.median(per),
                    "build (ms)": 1e3 * built,
                    "retained (KB)": retained / 1024,
                    "state (bytes of JSON)": state,
                }
            )
    return rows


def changed(k: int, changes: int = 10, every: int = 10**11) -> seekdata.Mixture:
    """K sources changed ``changes`` times, at every ``every`` positions: Zipf weights
    shuffled over the sources then, source c - 1 removed, a source added, source c grown."""
    r = random.Random(1)
    mix = seekdata.Mixture([range(1000)] * k, zipf(k), length=2 * 10**12)
    for c in range(1, changes + 1):
        weights: list[Fraction | int] = list(zipf(len(mix.datasets) + 1))
        r.shuffle(weights)
        weights[c - 1] = 0
        mix = mix.changed(c * every, weights, add=[range(500)], remove=[c - 1],
                          grown={c: range(len(mix.datasets[c]) + 200)})  # fmt: skip
    return mix


def change_rows(quick: bool) -> list[dict[str, Any]]:
    rows = []
    for k in (16, 1000):
        t0 = time.perf_counter()
        mix = changed(k)
        built = time.perf_counter() - t0
        p = 10**12  # after every change (the last is at 1e12)
        per = [
            H.best_of(lambda q=p + j, m=mix: m.locate(q), repeat=3)
            for j in range(5 if quick else 20)
        ]
        loader = seekdata.StatefulDataLoader(mix, batch_size=32)
        state = loader.state_dict()
        state.update(position=p, step=p // 32)  # the cursor after every change
        loader.load_state_dict(state)
        saved = loader.state_dict()
        rows.append(
            {
                "K": f"{k} -> {len(mix.datasets)}",
                "changes": len(saved["source"]["history"]),  # the mixture's own records
                "p": "1e12",
                "locate (us)": 1e6 * statistics.median(per),
                "build (ms)": 1e3 * built,
                "state (bytes of JSON)": len(json.dumps(saved)),
            }
        )
    return rows


#: throughput case -> the baseline its ratio is taken against (the same round)
THROUGHPUT_PAIRS = {
    "DataLoader + reseed, ConcatDataset + WeightedRandomSampler": None,
    "DataLoader, ConcatDataset + WeightedRandomSampler": None,
    "seekdata, Mixture": "DataLoader + reseed, ConcatDataset + WeightedRandomSampler",
    "seekdata, ConcatDataset in order (no mixing)": (
        "DataLoader + reseed, ConcatDataset + WeightedRandomSampler"
    ),
    "seekdata, Mixture, reseed off": "DataLoader, ConcatDataset + WeightedRandomSampler",
}


def throughput_rows(
    quick: bool, workers_list: tuple[int, ...] = (0, 2), rounds: int | None = None
) -> list[dict[str, Any]]:
    """Mixture against the same sources drawn by torch's weighted sampler. With reseeding on,
    the baseline's dataset reseeds torch/numpy/random per sample itself (the harness's
    ``Reseeding``), as seekdata does; with it off (loader and mixture), a plain DataLoader."""
    k, n, batches = 4, 20_000, 60 if quick else 200
    sources = [H.Synthetic(n, work_us=50, draw="global") for _ in range(k)]
    weights = [Fraction(4, 10), Fraction(3, 10), Fraction(2, 10), Fraction(1, 10)]
    mix = seekdata.Mixture(sources, weights)
    mix_off = seekdata.Mixture(sources, weights, reseed_global_rng=False)
    concat = torch.utils.data.ConcatDataset(sources)
    per_sample = torch.tensor([float(w) / n for w in weights for _ in range(n)], dtype=torch.double)

    def weighted(dataset: Any, w: int) -> float:
        sampler = torch.utils.data.WeightedRandomSampler(
            per_sample, len(concat), generator=torch.Generator().manual_seed(0)
        )
        loader = torch.utils.data.DataLoader(dataset, 32, sampler=sampler, num_workers=w)
        return H.samples_per_s(loader, batches)

    def ours(dataset: Any, w: int, reseed: bool = True) -> float:
        loader = seekdata.StatefulDataLoader(
            dataset, batch_size=32, num_workers=w, reseed_global_rng=reseed
        )
        return H.samples_per_s(loader, batches)

    rows = []
    for workers in workers_list:
        run = {
            "DataLoader + reseed, ConcatDataset + WeightedRandomSampler": lambda w=workers: (
                weighted(H.Reseeding(concat), w)
            ),
            "DataLoader, ConcatDataset + WeightedRandomSampler": lambda w=workers: weighted(
                concat, w
            ),
            "seekdata, Mixture": lambda w=workers: ours(mix, w),
            "seekdata, ConcatDataset in order (no mixing)": lambda w=workers: ours(concat, w),
            "seekdata, Mixture, reseed off": lambda w=workers: ours(mix_off, w, reseed=False),
        }
        results = H.interleave(run, rounds=rounds or (3 if quick else 9))
        for name, values in results.items():
            base = THROUGHPUT_PAIRS[name]
            ratios = [v / r for v, r in zip(values, results[base], strict=True)] if base else []
            rows.append(
                {
                    "loader": name,
                    "workers": workers,
                    "samples/s": H.median(values),
                    "vs": base or "",
                    "ratio": H.median(ratios) if ratios else "",
                    "spread": f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "",
                }
            )
    return rows


def realised(stream: np.ndarray, weights: list[Fraction]) -> float:
    """max over prefixes and sources of |count - weight * prefix length|."""
    worst = 0.0
    p = np.arange(1, len(stream) + 1)
    for k, w in enumerate(weights):
        counts = np.cumsum(stream == k)
        worst = max(worst, float(np.max(np.abs(counts - float(w) * p))))
    return worst


def discrepancy_rows(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    n = 20_000 if quick else 200_000
    rows, curves = [], {}
    for name, weights in (
        ("2 sources 0.7 / 0.3", [Fraction(7, 10), Fraction(3, 10)]),
        ("3 equal", [Fraction(1, 3)] * 3),
        ("Zipf, K = 10", zipf(10)),
        ("Zipf, K = 100", zipf(100)),
        ("Zipf, K = 1000", zipf(1000)),
        ("random integers 1..30, K = 9", [3, 32, 22, 4, 1, 10, 16, 3, 4]),
    ):
        mix = seekdata.Mixture([range(10)] * len(weights), weights)
        normal = list(mix.weights)
        stream = np.array([mix._tree.locate(p)[0] for p in range(n)])
        draws = torch.multinomial(
            torch.tensor([float(w) for w in normal], dtype=torch.double),
            n,
            replacement=True,
            generator=torch.Generator().manual_seed(0),
        ).numpy()
        rows.append(
            {
                "weights": name,
                "stated bound": float(mix.bound),
                "Mixture realised": realised(stream, normal),
                "WeightedRandomSampler realised": realised(draws, normal),
            }
        )
        if name == "Zipf, K = 10":
            p = np.arange(1, n + 1)
            curves = {
                "Mixture": np.abs(np.cumsum(stream == 0) - float(normal[0]) * p)[::97].tolist(),
                "WeightedRandomSampler": np.abs(np.cumsum(draws == 0) - float(normal[0]) * p)[
                    ::97
                ].tolist(),
                "p": p[::97].tolist(),
            }
    return rows, curves


def plot(out: Any, seek: list[dict[str, Any]], curves: dict[str, Any]) -> None:
    plt = H.pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for k in (2, 16, 1000):
        pts = [
            (float(r["p"]), r["locate (us)"]) for r in seek if r["K"] == k and "locate (us)" in r
        ]
        a.plot(*zip(*pts, strict=True), marker="o", label=f"Mixture.locate, K = {k} (µs)")
    pts = [(float(r["p"]), r["first batch (ms)"] * 1e3) for r in seek if "first batch (ms)" in r]
    a.plot(*zip(*pts, strict=True), marker="s", label="loader first batch of 32, K = 16 (µs)")
    key = "WeightedRandomSampler to p (ms)"
    pts = [(float(r["p"]), r[key] * 1e3) for r in seek if key in r]
    a.plot(*zip(*pts, strict=True), marker="x", label="WeightedRandomSampler reaching p (µs)")
    a.set(xscale="log", yscale="log", xlabel="position p", ylabel="µs", title="seek to p")
    a.legend(fontsize=7)
    b.plot(curves["p"], curves["WeightedRandomSampler"], label="WeightedRandomSampler", lw=0.8)
    b.plot(curves["p"], curves["Mixture"], label="seekdata.Mixture", lw=0.8)
    b.set(
        xscale="log",
        xlabel="prefix length p",
        ylabel="|count - weight × p|, heaviest source",
        title="per-prefix discrepancy, Zipf K = 10",
    )
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    plt.close(fig)
    print(f"wrote {out.with_suffix('.png')}")


def main() -> None:
    p = H.parser(__doc__ or "", "mixture")
    p.add_argument("--only-throughput", action="store_true", help="only the throughput table")
    p.add_argument("--only-schedule", action="store_true", help="only the schedule table")
    p.add_argument("--workers", default="0,2", help="num_workers list for throughput (0,2)")
    p.add_argument("--rounds", type=int, default=None,
                   help="throughput: interleaved rounds (default 9, --quick 3)")  # fmt: skip
    args = p.parse_args()
    workers = tuple(int(w) for w in args.workers.split(","))
    schedule_columns = ["K", "segments", "p", "locate (us)", "build (ms)", "retained (KB)",
                        "state (bytes of JSON)"]  # fmt: skip
    change_columns = ["K", "changes", "p", "locate (us)", "build (ms)", "state (bytes of JSON)"]
    if args.only_schedule:
        with H.quiet():
            schedule = schedule_rows(args.quick)
            changes = change_rows(args.quick)
        print(H.table(schedule, schedule_columns))
        print()
        print(H.table(changes, change_columns))
        H.write(args.out.with_name("mixture_schedule.json"), "mixture", None, schedule=schedule,
                changes=changes)  # fmt: skip
        return
    if args.only_throughput:
        with H.quiet():
            throughput = throughput_rows(args.quick, workers, args.rounds)
        print(H.table(throughput, ["loader", "workers", "samples/s", "vs", "ratio", "spread"]))
        H.write(args.out.with_name("mixture_throughput.json"), "mixture", None,
                throughput=throughput)  # fmt: skip
        return
    with H.quiet():
        seek = seek_rows(args.quick)
        memory = memory_rows()
        throughput = throughput_rows(args.quick, workers, args.rounds)
        discrepancy, curves = discrepancy_rows(args.quick)
        schedule = schedule_rows(args.quick)
        changes = change_rows(args.quick)
    print(
        H.table(
            seek,
            ["K", "p", "locate (us)", "first batch (ms)", "WeightedRandomSampler to p (ms)"],
        )
    )
    print()
    print(H.table(memory, list(memory[0])))
    print()
    print(H.table(throughput, ["loader", "workers", "samples/s", "vs", "ratio", "spread"]))
    print()
    print(H.table(discrepancy, list(discrepancy[0])))
    print()
    print(H.table(schedule, schedule_columns))
    print()
    print(H.table(changes, change_columns))
    H.write(
        args.out,
        "mixture",
        None,
        seek=seek,
        memory=memory,
        throughput=throughput,
        discrepancy=discrepancy,
        schedule=schedule,
        changes=changes,
    )
    plot(args.out, seek, curves)


if __name__ == "__main__":
    main()
