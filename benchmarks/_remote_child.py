"""One measured loader run in a fresh process, for benchmarks/remote.py.

``python _remote_child.py JOB``; JOB is JSON: ``kind`` (tar, windows, parquet), ``urls``,
``options`` (the dataset's keyword arguments), ``batch``, ``workers``, ``state`` (a loader state
to resume from, or null), ``reseed`` (optional, default true: the loader's
``reseed_global_rng``), ``mode``:

- ``first``: prints ``FIRST <seconds since start> <items>`` as soon as the first batch is in
  hand, then exits (the parent times the process from its start);
- ``steady``: skips ``warmup`` batches, then prints JSON ``{"items": n, "seconds": s}`` for the
  next ``steps`` batches (0: the rest of the epoch).
"""

from __future__ import annotations

import itertools
import json
import sys
import time

T0 = time.perf_counter()


def make(job: dict) -> object:
    import seekdata

    kind, options = job["kind"], job["options"]
    if job.get("cache"):  # a machine-shared Cache (--cache): the workers fetch each block once
        from seekdata.remote import Cache

        options = {**options, "cache": Cache(job["cache"], max_bytes=8 << 30)}
    if kind == "tar":
        from seekdata.wds import TarShards

        ds = TarShards(job["urls"], **options)
        order, collate = "shards", lambda s: [x["bin"] for x in s]
    elif kind == "windows":
        from seekdata.tokens import TokenWindows

        order, collate = job.get("windows_order", "feistel"), None
        if order == "shards":  # shards of 4096 windows: 16 MiB of uint16 at seq_len 2048
            options = {"shard_windows": 4096, **options}
        ds = TokenWindows(job["urls"], job["seq_len"], **options)
    else:
        from seekdata.parquet import ParquetRows

        ds = ParquetRows(job["urls"], **options)
        order, collate = "shards", dict
    sampler = seekdata.DistributedSampler(ds, 1, 0, order=order, seed=0)
    loader = seekdata.StatefulDataLoader(
        ds,
        batch_size=job["batch"],
        sampler=sampler,
        num_workers=job["workers"],
        collate_fn=collate,
        seed=0,
        persistent_workers=False,
        reseed_global_rng=job.get("reseed", True),
    )
    if job["state"] is not None:
        loader.load_state_dict(job["state"])
    return loader


def count(batch: object) -> int:
    if isinstance(batch, list):
        return len(batch)
    first = next(iter(batch.values()))  # type: ignore[attr-defined]
    return len(first)


def main() -> None:
    job = json.loads(sys.argv[1])
    loader = make(job)
    it = iter(loader)  # type: ignore[call-overload]
    if job["mode"] == "first":
        batch = next(it)
        print(f"FIRST {time.perf_counter() - T0:.6f} {count(batch)}", flush=True)
        return
    for _ in range(job["warmup"]):
        next(it)
    t, n = time.perf_counter(), 0
    for batch in itertools.islice(it, job["steps"] or None):
        n += count(batch)
    print(json.dumps({"items": n, "seconds": time.perf_counter() - t}), flush=True)


if __name__ == "__main__":
    main()
