"""The fetch loop's own cost per sample: what the loader adds around ``dataset[index]``.

    python benchmarks/fetch_loop.py           # ~1 min: results/fetch_loop.json
    python benchmarks/fetch_loop.py --quick   # a smoke run

Issue 36 §4 gave the per-batch fetch loop to :mod:`seekdata._core.sample` (the per-sample
context's module); this script says whether it kept its speed. The dataset is the cheapest
there is (sample i is ``i``: :class:`seekdata.tools.bench.Indices`), so nearly all of the time
is the loop: keying the sample, reseeding global RNG, the call. Two measurements, each over
``--samples`` samples in batches of ``--batch-size``, for each reseeding choice (off: no
per-sample work; ``("torch", "numpy")``: two generators; ``True``: the three of the default):

- ``fetch``: the engine-side fetch of planned batches (``KeyedDataset.__getitems__``) alone,
  the loop the refactor moved: ns per sample;
- ``loader``: a whole ``StatefulDataLoader`` epoch at ``num_workers=0`` (plan, fetch, collate,
  state), ns per sample.

Without reseeding a sample costs ~0.1 µs, so those cases run ``--samples`` (1e6); reseeding costs
µs a sample (torch's ``manual_seed`` alone ~5 µs), so those run a tenth as many.

Times are this process's CPU time (``time.process_time``), which a shared machine's load
disturbs less than wall time. Each case runs ``--rounds`` times in a new random order every
round; the table gives the median (and min-max) ns per sample. To compare two commits, alternate
runs of the script on each (``--rounds 1`` a run) and compare the medians over runs.
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H
import seekdata
from seekdata._loader.fetch import KeyedDataset
from seekdata._loader.plan import PlannedBatch

#: reseeding choices, by the name the table shows
RESEED: dict[str, Any] = {"off": False, "torch+numpy": ("torch", "numpy"), "all": True}


def fetch_s(n: int, batch_size: int, reseed: Any) -> float:
    """Seconds to fetch ``n`` samples as planned batches through the engine's wrapper."""
    keyed = KeyedDataset(H.Indices(n), 0, reseed)
    batches = [
        PlannedBatch(0, b, tuple(range(i, min(i + batch_size, n))))
        for b, i in enumerate(range(0, n, batch_size))
    ]
    fetch = keyed.__getitems__
    t0 = time.process_time()
    for planned in batches:
        fetch(planned)
    return time.process_time() - t0


def loader_s(n: int, batch_size: int, reseed: Any) -> float:
    """Seconds for one epoch of ``n`` samples through a loader at ``num_workers=0``."""
    loader = seekdata.StatefulDataLoader(
        H.Indices(n), batch_size=batch_size, seed=0, reseed_global_rng=reseed
    )
    t0 = time.process_time()
    for _ in loader:
        pass
    return time.process_time() - t0


def main() -> None:
    p = H.parser(__doc__, "fetch_loop")
    p.add_argument("--samples", type=int, default=1_000_000, help="samples per run")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5, help="runs per case (median reported)")
    args = p.parse_args()
    n, rounds = (20_000, 3) if args.quick else (args.samples, args.rounds)
    cases = {}
    counts = {}
    for name, reseed in RESEED.items():
        m = n if reseed is False else max(1, n // 10)
        cases[f"fetch {name}"] = lambda r=reseed, m=m: fetch_s(m, args.batch_size, r)
        cases[f"loader {name}"] = lambda r=reseed, m=m: loader_s(m, args.batch_size, r)
        counts[f"fetch {name}"] = counts[f"loader {name}"] = m
    times = H.interleave(cases, rounds)
    rows = []
    for case, runs in times.items():
        per = [t / counts[case] * 1e9 for t in runs]
        rows.append(
            {
                "case": case,
                "ns/sample": round(H.median(per), 1),
                "min": round(min(per), 1),
                "max": round(max(per), 1),
                "samples": counts[case],
                "runs": len(per),
            }
        )
    print(H.table(rows, ["case", "ns/sample", "min", "max", "samples", "runs"]))
    H.write(args.out, "fetch_loop", rows, samples=n, batch_size=args.batch_size, rounds=rounds)


if __name__ == "__main__":
    main()
