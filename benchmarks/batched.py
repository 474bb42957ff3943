"""Batched fetch: seekdata against torch's DataLoader on datasets that read a batch at once.

    python benchmarks/batched.py             # ~6 min: results/batched.json + batched.png
    python benchmarks/batched.py --alternate # num_workers=0, blocks: results/batched_alternate.*
    python benchmarks/batched.py --quick     # a smoke run

Issue 20's measurement: a dataset with ``__getitems__`` (one read per batch), batch 256, shuffled,
2 epochs in one process, workers 0 and 2, loaders in a new random order every round (each
loader's workers exit before the next starts), median over rounds. Sources (one dataset object
each, the same for every loader):

- ``hf``: Hugging Face ``datasets.Dataset.from_dict`` of 20,000 rows of 64 floats,
  ``with_format("torch")``: one Arrow read per batch (~2 ms for 256 rows; ~90 µs a row read
  alone);
- ``tokens``: 20,000 rows of 2048 token ids (uint16) in a file read through a numpy memmap,
  as a pretokenised language-model corpus is stored; ``__getitems__`` reads the batch's rows in
  one fancy-indexed read and returns a list of int64 row tensors, which torch's collation
  stacks (:class:`seekdata.tools.bench.MemmapRows`);
- ``rows``: the same with 64 float32 a row, the cheapest batched read (~1 µs a sample): the
  loader's own per-batch cost at its most visible. 20 epochs a run (2 are ~50 ms, too short
  to time on a shared machine), unless ``--epochs`` says otherwise.

Loaders: ``DataLoader`` (torch's, the baseline), ``seekdata`` (its defaults: batched fetch,
global RNG reseeded per batch from the batch's counters, ``step_rng``), ``seekdata
step_rng=False`` (the same without keying the caller's RNG at each batch: ~20 µs a batch, the
loader's largest fixed cost, which torch's loader does not do), ``torchdata``,
``DataLoader + reseed`` (torch's over a dataset that reseeds the same three generators once per
batch itself) and ``seekdata batched_fetch=False`` (per-sample keys: ``__getitem__`` per
sample, what the loader did before). A run is timed from building the loader to the end of
the last epoch (worker start-up included, as a training job pays it). Ratios are the median of
the per-round ratios to the DataLoader of the same round (paired: drift cancels), with their
min-max; extra µs per batch is the median per-round difference in time, per batch.
Goal (issue 20): seekdata >= 0.95x of DataLoader at workers 0 and 2 on ``hf`` and on a second
batched source, ``tokens``.

``--alternate`` (num_workers=0 only): a single process's speed on a shared machine swings
within seconds, more than the differences measured here; so every loader's iterator is also
opened at once (endless, across epochs) and timed in alternating blocks of ``--block`` batches,
in a new random order each cycle. Ratio: DataLoader's summed block time ÷ the loader's, with the
interquartile range of the per-cycle ratios.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H

LOADERS = (
    "DataLoader",
    "seekdata",
    "seekdata step_rng=False",
    "torchdata",
    "DataLoader + reseed",
    "seekdata batched_fetch=False",
)
SOURCES = ("hf", "tokens", "rows")
#: epochs per run unless --epochs is given
EPOCHS = {"hf": 2, "tokens": 2, "rows": 20}


def make(name: str, dataset: Any, batch: int, workers: int) -> Any:
    if name.startswith("seekdata "):  # seekdata with one option changed
        option = name.split(" ", 1)[1].split("=")[0]
        return H.make_loader("seekdata", dataset, batch, workers, **{option: False})
    return H.make_loader(name, dataset, batch, workers)


def one_run(name: str, dataset: Any, batch: int, workers: int, epochs: int) -> dict[str, float]:
    """Build the loader and run ``epochs`` epochs: samples/s, seconds, batches."""
    t0 = time.perf_counter()
    loader = make(name, dataset, batch, workers)
    samples = batches = 0
    for _ in range(epochs):
        for b in loader:
            samples += H.batch_len(b)
            batches += 1
    seconds = time.perf_counter() - t0
    del loader
    return {"samples_s": samples / seconds, "seconds": seconds, "batches": batches}


def source(name: str, rows: int, scratch: pathlib.Path) -> Any:
    if name == "hf":
        return H.arrow_table(rows)
    if name == "tokens":
        return H.MemmapRows.create(scratch / "tokens.u16", rows, 2048, "uint16")
    return H.MemmapRows.create(scratch / "rows.f32", rows, 64)


def measure(args: Any) -> list[dict[str, Any]]:
    out = []
    with H.quiet(), tempfile.TemporaryDirectory(prefix="batched-") as scratch:
        for src in args.sources:
            dataset = source(src, args.rows, pathlib.Path(scratch))
            for workers in args.workers:
                epochs = args.epochs or EPOCHS[src]
                run = functools.partial(
                    one_run, dataset=dataset, batch=args.batch, workers=workers, epochs=epochs
                )
                cases = {name: functools.partial(run, name) for name in args.loaders}
                results = H.interleave(cases, args.rounds, seed=workers)
                base = results["DataLoader"]
                for name in args.loaders:
                    runs = results[name]
                    ratios = [
                        r["samples_s"] / b["samples_s"] for r, b in zip(runs, base, strict=True)
                    ]
                    extra = [
                        1e6 * (r["seconds"] - b["seconds"]) / b["batches"]
                        for r, b in zip(runs, base, strict=True)
                    ]
                    out.append(
                        {
                            "source": src,
                            "workers": workers,
                            "loader": name,
                            "epochs": epochs,
                            "samples/s": H.median([r["samples_s"] for r in runs]),
                            "÷ DataLoader": H.median(ratios),
                            "spread": f"{min(ratios):.2f}-{max(ratios):.2f}",
                            "extra us/batch": H.median(extra),
                            "ratios": ratios,
                        }
                    )
                    print(f"  {src} w{workers} {name}: {H.median(ratios):.3f}", file=sys.stderr)
            del dataset
    return out


def endless(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


def alternate(args: Any) -> list[dict[str, Any]]:
    """num_workers=0: each loader's iterator open at once, timed in alternating blocks."""
    out = []
    with H.quiet(), tempfile.TemporaryDirectory(prefix="batched-") as scratch:
        for src in args.sources:
            dataset = source(src, args.rows, pathlib.Path(scratch))
            iters = {name: endless(make(name, dataset, args.batch, 0)) for name in args.loaders}
            for it in iters.values():
                for _ in range(5):  # the first batches: epoch set-up, caches
                    next(it)
            seconds: dict[str, list[float]] = {name: [] for name in args.loaders}
            shuffler = random.Random(0)  # the benchmark's own stream: never the global one
            for _ in range(args.cycles):
                for name in shuffler.sample(args.loaders, len(args.loaders)):
                    it, t0 = iters[name], time.perf_counter()
                    for _ in range(args.block):
                        next(it)
                    seconds[name].append(time.perf_counter() - t0)
            base = seconds["DataLoader"]
            blocks = args.cycles * args.block
            for name in args.loaders:
                cycle = sorted(b / a for a, b in zip(seconds[name], base, strict=True))
                q = len(cycle) // 4
                out.append(
                    {
                        "source": src,
                        "workers": 0,
                        "loader": name,
                        "samples/s": blocks * args.batch / sum(seconds[name]),
                        "÷ DataLoader": sum(base) / sum(seconds[name]),
                        "spread": f"{cycle[q]:.3f}-{cycle[-q - 1]:.3f}",
                        "extra us/batch": 1e6 * (sum(seconds[name]) - sum(base)) / blocks,
                    }
                )
            del iters, dataset
    return out


def plot(out: pathlib.Path, rows: list[dict[str, Any]], args: Any) -> None:
    configs = list(dict.fromkeys((r["source"], r["workers"]) for r in rows))
    kinds = [k for k in dict.fromkeys(r["loader"] for r in rows) if k != "DataLoader"]
    series = {
        kind: [
            next(
                (
                    r["÷ DataLoader"]
                    for r in rows
                    if (r["source"], r["workers"]) == c and r["loader"] == kind
                ),
                math.nan,
            )
            for c in configs
        ]
        for kind in kinds
    }
    fig, ax = H.pyplot().subplots(figsize=(9, 4.6))
    H.plot_bars(ax, [f"{s}\nworkers={w}" for s, w in configs], series, "samples/s ÷ DataLoader's")
    ax.axhline(1.0, color="#7f7f7f", lw=1)
    ax.axhline(0.95, color="#7f7f7f", lw=1, ls=":")
    top = max((v for values in series.values() for v in values if v == v), default=1.0)
    ax.set_ylim(0, max(1.25, top + 0.25))
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax.set_title(
        f"batched reads: {args.rows:,} rows, batch {args.batch} "
        f"(median of {args.rounds} rounds; dotted: 0.95)"
    )
    ax.tick_params(axis="x", labelrotation=0)
    H.save(fig, out.with_suffix(".png"))


def main() -> None:
    p = H.parser(__doc__.split("\n\n")[0] if __doc__ else "", "batched")
    p.add_argument(
        "--sources", default=",".join(SOURCES), help="comma-separated: " + ", ".join(SOURCES)
    )
    p.add_argument(
        "--loaders", default=",".join(LOADERS), help="comma-separated, of: " + ", ".join(LOADERS)
    )
    p.add_argument("--workers", default="0,2", help="num_workers values (default 0,2)")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, help="epochs per run (default: hf 2, tokens 2, rows 20)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument("--alternate", action="store_true", help="workers=0, alternating blocks")
    p.add_argument("--cycles", type=int, default=100, help="--alternate: cycles (100)")
    p.add_argument("--block", type=int, default=5, help="--alternate: batches a block (5)")
    args = p.parse_args()
    args.sources = args.sources.split(",")
    args.loaders = list(dict.fromkeys(["DataLoader", *args.loaders.split(",")]))
    args.workers = [int(w) for w in args.workers.split(",")]
    unknown = [s for s in args.sources if s not in SOURCES] + [
        x for x in args.loaders if x not in LOADERS
    ]
    if unknown:
        p.error(f"unknown source or loader {unknown}; choose from {SOURCES} and {LOADERS}")
    if args.quick:
        args.rows, args.epochs, args.rounds, args.cycles = 4096, args.epochs or 1, 1, 3
    config = {k: getattr(args, k) for k in ("sources", "loaders", "workers", "rows", "batch",
                                             "epochs", "rounds", "quick")}  # fmt: skip
    if args.alternate:
        rows = alternate(args)
        print(f"\nnum_workers=0, {args.rows:,} rows, batch {args.batch}, {args.cycles} cycles of "
              f"{args.block}-batch blocks in random order; ratio: DataLoader's summed time ÷ the "
              f"loader's; spread: the per-cycle ratios' interquartile range")  # fmt: skip
        columns = ["source", "loader", "samples/s", "÷ DataLoader", "spread", "extra us/batch"]
        config.update(cycles=args.cycles, block=args.block, mode="alternate")
        out = args.out.with_name(args.out.stem + "_alternate.json")
    else:
        rows = measure(args)
        print(f"\n{args.rows:,} rows, batch {args.batch}, shuffled; median of {args.rounds} "
              f"rounds in random order")  # fmt: skip
        columns = ["source", "workers", "epochs", "loader", "samples/s", "÷ DataLoader",
                   "spread", "extra us/batch"]  # fmt: skip
        out = args.out
    print(H.table(rows, columns))
    H.write(out, "batched", rows, config=config)
    plot(out, rows, args)


if __name__ == "__main__":
    main()
