"""webdataset shards: resume at 90 % of an epoch, and read throughput, seekdata vs webdataset.

    python benchmarks/wds.py                # 100 shards x 1000 samples; results/wds.json + .png
    python benchmarks/wds.py --data DIR     # write the shards under DIR once, reuse them later
    python benchmarks/wds.py --quick        # 10 shards x 200 samples, a smoke run
    python benchmarks/wds.py --profile      # also cProfile one seekdata pass, print hot spots

Samples are small (a 64-byte ``.bin`` and a ``.cls``), so reading costs what the readers
themselves cost, not the disk (the shards sit in the page cache after writing). Both sides
use the same collate: keys stay strings, bytes become one uint8 tensor.

Resume: the time from ``load_state_dict(state saved after 90 % of the epoch's batches)`` to
the first batch, checked against the uninterrupted run's batch at that step. seekdata:
``StatefulDataLoader`` over ``TarShards`` with ``order="shards"``; it seeks. torchdata:
its ``StatefulDataLoader`` over ``webdataset.WebDataset(urls, shardshuffle=False)``, which
has no state of its own, so torchdata re-reads (and collates) every earlier batch.

Throughput: samples/s over the whole dataset in order, seekdata (``shuffle=False``) vs
``WebDataset(urls, shardshuffle=False)`` through torch's DataLoader, same ``num_workers``,
cases interleaved A B A B over ``--rounds`` rounds (medians). Also seekdata's shuffled
``order="shards"``, and ``reseed_global_rng=False`` (the default seeds torch, numpy and
``random`` global RNG per sample, for augmentations that draw from them).

Goals (issue 6): resume <= 50 ms; sequential throughput >= 0.9x webdataset's.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import io
import json
import logging
import pathlib
import pstats
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.utils.data
import torchdata.stateful_dataloader
import webdataset as wds

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H
import seekdata
from seekdata.tools.cli import main as seekdata_cli
from seekdata.wds import TarShards

SEED = 0
MARKER = "seekdata-wds-bench.json"


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The same for both readers: keys as strings, ``.bin`` as one uint8 tensor, labels."""
    data = bytearray(b"".join(s["bin"] for s in samples))
    return {
        "__key__": [s["__key__"] for s in samples],
        "bin": torch.frombuffer(data, dtype=torch.uint8).view(len(samples), -1),
        "cls": torch.tensor([int(s["cls"]) for s in samples]),
    }


# -- data ---------------------------------------------------------------------------


def prepare(directory: pathlib.Path, shards: int, per_shard: int) -> tuple[str, float | None]:
    """Shards under ``directory`` (written unless already there); (brace pattern, write s)."""
    pattern = str(directory / f"shard-{{000000..{shards - 1:06d}}}.tar")
    layout = {"shards": shards, "per_shard": per_shard, "bin_bytes": 64}
    marker = directory / MARKER
    if marker.exists() and json.loads(marker.read_text()) == layout:
        return pattern, None
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("shard-*.tar*"):
        old.unlink()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    with wds.ShardWriter(str(directory / "shard-%06d.tar"), maxcount=per_shard, verbose=0) as w:
        for i in range(shards * per_shard):
            w.write({"__key__": f"{i:08d}", "bin": rng.bytes(64), "cls": i % 1000})
    seconds = time.perf_counter() - t0
    marker.write_text(json.dumps(layout))
    return pattern, seconds


def index_seconds(pattern: str, jobs: int) -> float:
    """``seekdata index PATTERN --force --jobs N``: a full rebuild of every index."""
    quiet = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(quiet), contextlib.redirect_stdout(quiet):  # the tqdm bar
        status = seekdata_cli(["index", pattern, "--force", "--jobs", str(jobs)])
    seconds = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"seekdata index failed: {quiet.getvalue()}")
    return seconds


# -- loaders ------------------------------------------------------------------------


def seekdata_loader(
    ds: TarShards, batch_size: int, num_workers: int, order: str | None, reseed: bool = True
) -> seekdata.StatefulDataLoader:
    sampler = None
    if order is not None:
        sampler = seekdata.DistributedSampler(ds, 1, 0, order=order, seed=SEED)
    return seekdata.StatefulDataLoader(
        ds,
        batch_size=batch_size,
        shuffle=None if sampler is not None else False,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        seed=SEED,
        reseed_global_rng=reseed,
    )


def webdataset_pipeline(urls: list[str]) -> wds.WebDataset:
    return wds.WebDataset(urls, shardshuffle=False)


def webdataset_loader(
    urls: list[str], batch_size: int, num_workers: int
) -> torch.utils.data.DataLoader[Any]:
    pipeline = webdataset_pipeline(urls)
    return torch.utils.data.DataLoader(
        pipeline, batch_size=batch_size, num_workers=num_workers, collate_fn=collate
    )


def torchdata_loader(
    urls: list[str], batch_size: int, num_workers: int
) -> torchdata.stateful_dataloader.StatefulDataLoader:
    return torchdata.stateful_dataloader.StatefulDataLoader(
        webdataset_pipeline(urls),
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate,
    )


# -- resume -------------------------------------------------------------------------


def state_at(make: Callable[[], Any], steps: int) -> tuple[dict[str, Any], list[str], float]:
    """Run ``steps`` batches; (state then, the next batch's keys, seconds to get there)."""
    loader = make()
    it: Iterator[Any] = iter(loader)
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    seconds = time.perf_counter() - t0
    state = loader.state_dict()
    expected = next(it)["__key__"]
    del it, loader
    return state, expected, seconds


def resume_seconds(make: Callable[[], Any], state: dict[str, Any], expected: list[str]) -> float:
    """load_state_dict -> first batch, which must be the uninterrupted run's next batch."""
    loader = make()
    t0 = time.perf_counter()
    loader.load_state_dict(state)
    it = iter(loader)
    batch = next(it)
    seconds = time.perf_counter() - t0
    if batch["__key__"] != expected:
        raise AssertionError(
            f"{type(loader).__module__}: the resumed first batch starts {batch['__key__'][:3]}, "
            f"the uninterrupted run's {expected[:3]}"
        )
    del it, loader
    return seconds


def first_batch_seconds(ds: TarShards, batch_size: int, workers: int) -> float:
    """A plain torch DataLoader's iter() -> first batch: what starting workers costs."""
    loader = torch.utils.data.DataLoader(
        ds, batch_size=batch_size, num_workers=workers, collate_fn=collate
    )
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    seconds = time.perf_counter() - t0
    del it, loader
    return seconds


def resume_rows(
    ds: TarShards, urls: list[str], args: Any, batch_size: int, repeat: int
) -> list[dict[str, Any]]:
    rows = []
    for workers in (0, 2):

        def make(workers: int = workers) -> seekdata.StatefulDataLoader:
            return seekdata_loader(ds, batch_size, workers, "shards")

        steps = round(args.fraction * len(make()))
        state, expected, _ = state_at(make, steps)
        state = json.loads(json.dumps(state))
        times = [resume_seconds(make, state, expected) for _ in range(repeat)]
        rows.append(
            {
                "measure": f"resume at {args.fraction:.0%} (ms)",
                "reader": 'seekdata, order="shards"',
                "workers": workers,
                "value": 1e3 * H.median(times),
                "best": 1e3 * min(times),
                "goal": "<= 50",
                "step": steps,
            }
        )
        floor = [first_batch_seconds(ds, batch_size, workers) for _ in range(repeat)]
        rows.append(
            {
                "measure": "epoch start (ms)",
                "reader": "torch DataLoader over TarShards, iter() -> first batch",
                "workers": workers,
                "value": 1e3 * H.median(floor),
                "best": 1e3 * min(floor),
                "note": "the floor: no resume, no seekdata",
            }
        )
    for workers in args.torchdata_workers:

        def make_td(workers: int = workers) -> Any:
            return torchdata_loader(urls, batch_size, workers)

        steps = round(args.torchdata_fraction * -(-len(ds) // batch_size))
        state, expected, first_pass = state_at(make_td, steps)
        seconds = resume_seconds(make_td, state, expected)
        rows.append(
            {
                "measure": f"resume at {args.torchdata_fraction:.0%} (ms)",
                "reader": "torchdata + WebDataset",
                "workers": workers,
                "value": 1e3 * seconds,
                "best": 1e3 * seconds,
                "step": steps,
                "note": f"first pass to that step took {first_pass:.1f} s",
            }
        )
    return rows


# -- throughput ---------------------------------------------------------------------


def samples_per_second(make: Callable[[], Any], n: int) -> Callable[[], float]:
    def run() -> float:
        loader = make()
        t0 = time.perf_counter()
        count = sum(len(batch["__key__"]) for batch in loader)
        seconds = time.perf_counter() - t0
        if count != n:
            raise AssertionError(f"read {count} samples, expected {n}")
        return count / seconds

    return run


def throughput_rows(
    ds: TarShards, urls: list[str], batch_size: int, rounds: int
) -> list[dict[str, Any]]:
    n = len(ds)
    rows = []
    for workers in (0, 2):
        cases: dict[str, Callable[[], Any]] = {
            "webdataset": functools.partial(webdataset_loader, urls, batch_size, workers),
            "seekdata, sequential": functools.partial(
                seekdata_loader, ds, batch_size, workers, None
            ),
            'seekdata, order="shards"': functools.partial(
                seekdata_loader, ds, batch_size, workers, "shards"
            ),
            "seekdata, sequential, reseed_global_rng=False": functools.partial(
                seekdata_loader, ds, batch_size, workers, None, reseed=False
            ),
        }
        results = H.interleave({k: samples_per_second(f, n) for k, f in cases.items()}, rounds)
        base = H.median(results["webdataset"])
        for name, values in results.items():
            rows.append(
                {
                    "measure": "read throughput (samples/s)",
                    "reader": name,
                    "workers": workers,
                    "value": H.median(values),
                    "best": max(values),
                    "vs webdataset": H.median(values) / base,
                    "goal": ">= 0.9x" if name == "seekdata, sequential" else "",
                }
            )
    return rows


def profile(ds: TarShards, batch_size: int, top: int = 12) -> list[dict[str, Any]]:
    """cProfile one main-process sequential pass of seekdata; the top functions by own time."""
    loader = seekdata_loader(ds, batch_size, 0, None)
    prof = cProfile.Profile()
    prof.enable()
    for _ in loader:
        pass
    prof.disable()
    stats = pstats.Stats(prof)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]  # pstats' raw table
    entries = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    out = []
    for (file, line, func), (_, calls, own, cumulative, _) in entries:
        where = f"{'/'.join(pathlib.Path(file).parts[-2:])}:{line}({func})" if line else func
        out.append({"function": where, "calls": calls, "own s": own, "cumulative s": cumulative})
    print(H.table(out, ["function", "calls", "own s", "cumulative s"]))
    return out


def plot_label(reader: str) -> str:
    short = reader.split(",")[0]
    return "torch DataLoader, no resume" if short.startswith("torch DataLoader") else short


# -- main ---------------------------------------------------------------------------


def main() -> None:
    p = H.parser(__doc__ or "", "wds")
    p.add_argument("--data", type=pathlib.Path, help="directory for the shards (kept, reused)")
    p.add_argument("--shards", type=int, help="number of shards (default 100; --quick 10)")
    p.add_argument("--per-shard", type=int, help="samples per shard (default 1000; --quick 200)")
    p.add_argument("--batch-size", type=int, help="default 256; --quick 32")
    p.add_argument("--rounds", type=int, help="interleaved throughput rounds (default 3)")
    p.add_argument("--fraction", type=float, default=0.9, help="resume point (default 0.9)")
    p.add_argument(
        "--torchdata-fraction",
        type=float,
        help="torchdata's resume point, when replaying up to --fraction is too slow",
    )
    p.add_argument(
        "--torchdata-workers",
        type=lambda s: [int(w) for w in s.split(",") if w],
        default=[0, 2],
        help="num_workers values for torchdata's resume, comma-separated (default 0,2)",
    )
    p.add_argument("--jobs", type=int, default=2, help="seekdata index --jobs (besides 1)")
    p.add_argument("--profile", action="store_true", help="cProfile one seekdata pass")
    args = p.parse_args()
    shards = args.shards or (10 if args.quick else 100)
    per_shard = args.per_shard or (200 if args.quick else 1000)
    batch_size = args.batch_size or (32 if args.quick else 256)
    rounds = args.rounds or (1 if args.quick else 3)
    args.torchdata_fraction = args.torchdata_fraction or args.fraction

    # webdataset 1.0.2 never closes the shard files it opens; torchdata 0.11 calls a deprecated
    # torch API on every iter() and logs a warning on every replaying resume: none are ours
    warnings.simplefilter("ignore", ResourceWarning)
    warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)
    logging.getLogger("torchdata.stateful_dataloader.stateful_dataloader").setLevel(logging.ERROR)

    with contextlib.ExitStack() as stack:
        if args.data is None:
            directory = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        else:
            directory = args.data
        t_start = time.perf_counter()
        pattern, written = prepare(directory, shards, per_shard)
        print(f"{shards} shards x {per_shard} samples under {directory}", end="")
        print(f" (written in {written:.1f} s)" if written is not None else " (reused)")
        rows: list[dict[str, Any]] = []
        for jobs in sorted({1, args.jobs}):
            rows.append(
                {
                    "measure": "index build, all shards (s)",
                    "reader": f"seekdata index --jobs {jobs}",
                    "value": index_seconds(pattern, jobs),
                }
            )
        t0 = time.perf_counter()
        ds = TarShards(pattern)
        rows.append(
            {
                "measure": "open TarShards, indexes built (s)",
                "reader": "seekdata",
                "value": time.perf_counter() - t0,
            }
        )
        urls = ds.urls
        rows += resume_rows(ds, urls, args, batch_size, repeat=3 if args.quick else 7)
        rows += throughput_rows(ds, urls, batch_size, rounds)
        hot = profile(ds, batch_size) if args.profile else None
        elapsed = time.perf_counter() - t_start

    columns = ["measure", "reader", "workers", "value", "best", "vs webdataset", "goal", "note"]
    print(H.table(rows, columns))
    print(f"\n{elapsed:.0f} s in all")
    config = {
        "shards": shards,
        "per_shard": per_shard,
        "samples": shards * per_shard,
        "batch_size": batch_size,
        "rounds": rounds,
        "command": " ".join(["python", "benchmarks/wds.py", *sys.argv[1:]]),
        "seconds": elapsed,
    }
    H.write(args.out, "wds", rows, config=config, profile=hot)
    resume = [r for r in rows if r["measure"].startswith(("resume", "epoch start"))]
    H.bar_plot(
        args.out,
        f"resume at {args.fraction:.0%}: load_state_dict -> first batch",
        [f"{plot_label(r['reader'])}, workers={r['workers']}" for r in resume],
        [r["value"] for r in resume],
        "ms (log scale)",
        log=True,
    )
    reads = [r for r in rows if r["measure"].startswith("read")]
    H.bar_plot(
        args.out.with_name(args.out.stem + "-throughput.json"),
        "read throughput (samples/s)",
        [f"{r['reader']}, workers={r['workers']}" for r in reads],
        [r["value"] for r in reads],
        "samples/s",
    )


if __name__ == "__main__":
    main()
