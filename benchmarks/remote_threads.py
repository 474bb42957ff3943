"""Remote tar shards over a whole epoch: thread workers against worker processes, with and
without a ``Cache`` — bytes the server sent, the client's CPU per GB, wall time.

Starts moto's S3 server (``--s3-server seaweedfs``: SeaweedFS, which reads a range as a real
store does) and the counting proxy in front of it (seekdata._servers), writes ``--shards``
tar shards of ``--shard-mb`` MB (samples of ``--sample-kib`` KiB) and uploads them; their
indexes are built once, untimed. Then each case reads one whole epoch in shard-local order
(``order="shards"``, batch ``--batch``) in a fresh process of its own:

- ``workers 0``: the loader's own thread;
- ``threads``: ``num_workers=--workers``, ``worker_method="thread"``;
- ``processes``: ``num_workers=--workers`` worker processes (forked: they read through
  fsspec, whatever the main process used);
- ``+ Cache``: the same with a ``Cache`` in a new folder under ``--cache-root`` (tmpfs by
  default) for each run, so every run starts cold;
- ``fsspec`` / ``obstore``: the client library (``storage_options={"backend": ...}``) where
  both can run (no fork).

Per run: the bytes the server sent (the proxy's count of response bodies, every GET and HEAD),
the wall time of the epoch (``iter()`` to the last batch) and the client's CPU seconds over it —
the process's and its worker processes' (``getrusage`` of itself and of its reaped children;
the servers are other processes) — per GB of the epoch's shard bytes. Median of ``--rounds``,
the cases in a new shuffled order each round. The timed runs go through the proxy, whose
copying is neither process's CPU but adds to every case's wall time alike.

``python benchmarks/remote_threads.py`` prints the table and writes
results/remote_threads.json and remote_threads.png.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import _common as C  # benchmarks/ is on sys.path when a script here runs

BUCKET = "threads-bench"
MB = 1_000_000

#: (name, num_workers, worker_method, with a Cache, storage_options["backend"]); None: the
#: default (``"auto"``: obstore in the main process where it can run, fsspec in forked workers)
CASES = (
    ("workers 0, fsspec", 0, "multiprocessing", False, "fsspec"),
    ("workers 0, obstore", 0, "multiprocessing", False, "obstore"),
    ("threads, fsspec", None, "thread", False, "fsspec"),
    ("threads, obstore", None, "thread", False, "obstore"),
    ("processes (fsspec)", None, "multiprocessing", False, None),
    ("threads + Cache, obstore", None, "thread", True, "obstore"),
    ("processes + Cache (fsspec)", None, "multiprocessing", True, None),
)


def write_shards(folder: pathlib.Path, args: argparse.Namespace) -> int:
    """``args.shards`` tar shards under ``folder`` (deterministic); their total bytes."""
    import numpy as np
    import webdataset as wds

    gen = np.random.default_rng(0)
    per = max(1, int(args.shard_mb * MB) // (args.sample_kib * 1024 + 1536))
    n = 0
    for s in range(args.shards):
        with wds.TarWriter(str(folder / f"train-{s:04d}.tar")) as sink:
            for _ in range(per):
                sink.write({"__key__": f"k{n:07d}", "bin": gen.bytes(args.sample_kib * 1024)})
                n += 1
    return sum(p.stat().st_size for p in folder.glob("*.tar"))


def child(job: dict[str, Any]) -> None:
    """One epoch in this process; prints JSON: seconds, CPU seconds, samples, sample bytes."""
    import seekdata
    from seekdata.remote import Cache
    from seekdata.wds import TarShards

    options: dict[str, Any] = {"storage_options": job["storage"]}
    if job["cache"]:
        options["cache"] = Cache(job["cache"], max_bytes=8 << 30)
    ds = TarShards(job["urls"], **options)
    loader = seekdata.StatefulDataLoader(
        ds,
        batch_size=job["batch"],
        sampler=seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=0),
        num_workers=job["workers"],
        worker_method=job["method"],
        collate_fn=lambda samples: sum(len(s["bin"]) for s in samples),
        seed=0,
    )
    cpu0, t0 = _cpu(), time.perf_counter()
    nbytes = batches = 0
    for nb in loader:
        nbytes += nb
        batches += 1
    seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    print(json.dumps({"seconds": seconds, "cpu_s": cpu, "batches": batches, "bytes": nbytes}))


def _cpu() -> float:
    """CPU seconds of this process and of its ended, reaped children (worker processes)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    parser = C.parser(__doc__, "remote_threads", rounds=3)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mb", type=float, default=16)
    parser.add_argument("--sample-kib", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--s3-server", choices=("moto", "seaweedfs"), default="moto")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    parser.add_argument("--cache-root", default=shm, help="where each run's Cache folder goes")
    parser.add_argument("--cases", default=None,
                        help="the cases to run, names separated by ';' (default: all)")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.quick:
        args.shards, args.shard_mb = 4, 4
    from seekdata import _servers

    names = [c[0] for c in CASES] if args.cases is None else args.cases.split(";")
    wanted = [c for c in CASES if c[0] in names]
    with tempfile.TemporaryDirectory() as folder:
        data = pathlib.Path(folder)
        total = write_shards(data, args)
        serve = _servers.s3_server if args.s3_server == "moto" else _servers.seaweed_server
        with serve() as s3, _servers.fault_proxy(s3) as proxy:
            _servers.upload(s3, BUCKET, data)
            urls = f"s3://{BUCKET}/train-{{0000..{args.shards - 1:04d}}}.tar"
            storage = _servers.s3_options(proxy)
            from seekdata.wds import TarShards

            TarShards(urls, storage_options=storage)  # the indexes, once, untimed
            sent: dict[str, list[int]] = {c[0]: [] for c in wanted}
            cpu: dict[str, list[float]] = {c[0]: [] for c in wanted}
            batches: dict[str, int] = {}

            def case(
                name: str, workers: int | None, method: str, cached: bool, backend: str | None
            ) -> float:
                chosen = storage if backend is None else {**storage, "backend": backend}
                job = {"urls": urls, "storage": chosen, "batch": args.batch,
                       "workers": args.workers if workers is None else workers,
                       "method": method, "cache": None}  # fmt: skip
                with tempfile.TemporaryDirectory(dir=args.cache_root) as cache:
                    if cached:
                        job["cache"] = cache
                    proxy.reset()
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", json.dumps(job)],
                        capture_output=True, text=True, check=False,
                    )  # fmt: skip
                    if out.returncode:
                        raise SystemExit(f"{name}: the run failed\n{out.stderr[-3000:]}")
                    got = json.loads(out.stdout.strip().splitlines()[-1])
                    sent[name].append(int(proxy.stats()["body_bytes"]))
                cpu[name].append(got["cpu_s"])
                if batches.setdefault(name, got["batches"]) != got["batches"]:
                    raise SystemExit(f"{name}: {got['batches']} batches, {batches[name]} before")
                return float(got["seconds"])

            cases = {c[0]: (lambda c=c: case(*c)) for c in wanted}
            timed = C.rounds(cases, args.rounds)
    gb = total / 1e9
    rows = []
    for name, *_ in wanted:
        rows.append({
            "case": name,
            "seconds": timed[name]["median"],
            "runs": timed[name]["runs"],
            "sent_mb": C.median(sent[name]) / MB,
            "sent_x": C.median(sent[name]) / total,
            "cpu_s_gb": C.median(cpu[name]) / gb,
            "cpu_runs": cpu[name],
            "mb_s": total / MB / timed[name]["median"],
        })  # fmt: skip
    columns = [
        ("case", f"{args.workers} workers, {total / MB:.0f} MB of shards", "{}"),
        ("seconds", "epoch s", "{:.2f}"),
        ("mb_s", "MB/s", "{:.0f}"),
        ("sent_mb", "server sent MB", "{:.0f}"),
        ("sent_x", "÷ shards", "{:.2f}"),
        ("cpu_s_gb", "client CPU s/GB", "{:.2f}"),
    ]
    print(C.markdown(rows, columns, numbers=True))
    out = C.write(args, {"rows": rows}, shard_bytes=total)
    print(f"wrote {out}")

    def draw(plt: Any) -> Any:
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        names = [r["case"] for r in rows]
        for ax, key, label in zip(axes, ("sent_x", "cpu_s_gb", "seconds"),
                                  ("server sent ÷ shard bytes", "client CPU s per GB",
                                   "epoch wall s"), strict=True):  # fmt: skip
            ax.barh(names, [r[key] for r in rows], color="tab:blue")
            ax.set_xlabel(label)
            ax.invert_yaxis()
        for ax in axes[1:]:
            ax.set_yticklabels([])
        fig.suptitle(f"remote tar shards, one epoch, {args.s3_server}, median of {args.rounds}")
        return fig

    C.plot(out.with_suffix(".png"), draw)


if __name__ == "__main__":
    main()
