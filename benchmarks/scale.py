"""Corpora at scale: a fresh TarShards per rank at 10^2 … 10^5 tiny shards, and seekdata index -j 2.

What a rank pays to start, against the number of shards, each case a fresh process timed after
its imports (``TarShards(...)`` alone):

- ``local``: the shards on local disk with their folder's manifest (``seekdata index``'s);
- ``s3``: the same corpus in a bucket of moto's S3 server on 127.0.0.1 (the manifest read with
  one GET). Only the manifest is put in the bucket: construction reads nothing else (the
  counted test, tests/sources/test_scale_counts.py, fails on any other request), and moto
  takes minutes to hold 10^5 objects (``--s3-objects`` puts that many shards too);
- ``local, no manifest``: today's path without a manifest (every shard's index opened), up to
  ``--baseline-max`` shards.

Memory per file is the slope of what construction leaves allocated (``tracemalloc``) between
the two largest sizes, less the URL strings (which the caller's list holds anyway). Then
``seekdata index --force`` over ``--index-shards`` shards of 100 samples with ``-j 1`` and ``-j 2``
(wall time of the command, the speed-up; the target is ≥ 1.8× on two free cores).

``python benchmarks/scale.py`` prints the tables and writes results/scale.json and
results/scale.png; ``--quick`` runs 10^2 and 10^3 shards, one round.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # the tiny-shard writer is the scale tests' (tests/helpers)

import _common as C  # noqa: E402

BUCKET = "scale-bench"

#: One construction in a fresh process: imports first, then only ``TarShards(...)`` is timed
#: (or, with ``memory``, traced).
CHILD = r"""
import json, sys, time, tracemalloc
job = json.loads(sys.argv[1])
from seekdata.wds import TarShards
import seekdata.sources.files.manifest, seekdata.sources.remote
if job["kw"].get("storage_options"):
    import s3fs  # the S3 client's imports are imports too; making the client is timed
if job["memory"]:
    tracemalloc.start()
start = time.perf_counter()
ds = TarShards(job["urls"], **job["kw"])
took = time.perf_counter() - start
held = tracemalloc.get_traced_memory()[0] if job["memory"] else 0
urls = sum(sys.getsizeof(u) + 8 for u in ds._urls)
print(json.dumps({"s": took, "held": held, "urls": urls, "n": len(ds), "lazy": ds._lazy.made}))
"""


def construct(urls: str, kw: dict[str, Any], memory: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    job = json.dumps({"urls": urls, "kw": kw, "memory": memory})
    done = subprocess.run(
        [sys.executable, "-c", CHILD, job], capture_output=True, text=True, env=env, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return dict(json.loads(done.stdout))


def index_command(pattern: str, jobs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "seekdata", "index", "--force", "-j", str(jobs), pattern],
        capture_output=True, text=True, env=env, timeout=1800,
    )  # fmt: skip
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return took


def write_scanned(folder: pathlib.Path, n: int, samples: int = 100) -> str:
    """``n`` shards of ``samples`` samples each (100 bytes): the scan, not the file system,
    is what ``-j`` divides."""
    import io
    import tarfile

    folder.mkdir(parents=True)
    for i in range(n):
        with tarfile.open(folder / f"shard-{i:05d}.tar", "w") as tar:
            for k in range(samples):
                info = tarfile.TarInfo(f"s{i:05d}-{k:03d}.bin")
                info.size = 100
                tar.addfile(info, io.BytesIO(bytes([k]) * 100))
    return str(folder / f"shard-{{00000..{n - 1:05d}}}.tar")


def main() -> None:
    from tests.helpers import tiny_shards

    from seekdata import _servers
    from seekdata.sources.remote import Stores

    p = C.parser(__doc__ or "", "scale")
    p.add_argument("--sizes", default="100,1000,10000,100000", help="shard counts")
    p.add_argument("--baseline-max", type=int, default=1000,
                   help="largest count measured without a manifest (default 1000)")  # fmt: skip
    p.add_argument("--s3-objects", type=int, default=0,
                   help="also put this many shards (and indexes) in the bucket")  # fmt: skip
    p.add_argument("--index-shards", type=int, default=1600,
                   help="shards of 100 samples for seekdata index -j 1/-j 2")  # fmt: skip
    p.add_argument("--from-json", type=pathlib.Path, metavar="FILE",
                   help="measure nothing: print the tables and draw the plot of FILE")  # fmt: skip
    args = p.parse_args()
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        report(args, saved["construction"], saved["index"], saved["bytes_per_file"], write=False)
        return
    sizes = [100, 1000] if args.quick else [int(x) for x in args.sizes.split(",")]
    count = 1 if args.quick else args.rounds
    root = pathlib.Path(tempfile.mkdtemp(prefix="seekdata-scale-"))
    rows: list[dict[str, Any]] = []
    try:
        with _servers.s3_server() as server:
            options = _servers.s3_options(server)
            client = _servers.s3_client(server)
            cases = {}
            for n in sizes:
                local = tiny_shards.write_local(root / f"n{n}", n)
                upload = range(min(n, args.s3_objects))
                remote = tiny_shards.write_s3(
                    client, BUCKET, f"n{n}", n, Stores(options), upload=upload
                )
                cases[("local", n)] = (local, {})
                cases[("s3", n)] = (remote, {"storage_options": options})
                if n <= args.baseline_max:
                    cases[("local, no manifest", n)] = (local, {"manifest": False})
                print(f"wrote {n} shards", flush=True)
            timed = C.rounds(
                {f"{w}|{n}": (lambda u=u, k=k: construct(u, k)["s"]) for (w, n), (u, k) in
                 cases.items()},
                count,
            )  # fmt: skip
            for (where, n), (urls, kw) in cases.items():
                traced = construct(urls, kw, memory=True)
                rows.append({
                    "where": where, "files": n, "s": timed[f"{where}|{n}"]["median"],
                    "runs": timed[f"{where}|{n}"]["runs"], "held_bytes": traced["held"],
                    "url_bytes": traced["urls"], "indexes_read": traced["lazy"],
                })  # fmt: skip
        index_rows = []
        if args.index_shards:
            n = 50 if args.quick else args.index_shards
            pattern = write_scanned(root / "index", n)
            runs = C.rounds({f"-j {j}": (lambda j=j: index_command(pattern, j)) for j in (1, 2)},
                            count)  # fmt: skip
            one, two = runs["-j 1"]["median"], runs["-j 2"]["median"]
            index_rows = [
                {"jobs": 1, "shards": n, "s": one, "speedup": 1.0, "runs": runs["-j 1"]["runs"]},
                {"jobs": 2, "shards": n, "s": two, "speedup": one / two,
                 "runs": runs["-j 2"]["runs"]},
            ]  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)

    per_file = {}
    for where in dict.fromkeys(r["where"] for r in rows):
        mine = sorted((r for r in rows if r["where"] == where), key=lambda r: r["files"])
        if len(mine) >= 2:
            a, b = mine[-2], mine[-1]
            held = (b["held_bytes"] - b["url_bytes"]) - (a["held_bytes"] - a["url_bytes"])
            per_file[where] = held / (b["files"] - a["files"])
            for r in mine:
                r["bytes_per_file"] = per_file[where]
    report(args, rows, index_rows, per_file)


def report(
    args: Any,
    rows: list[dict[str, Any]],
    index_rows: list[dict[str, Any]],
    per_file: dict[str, float],
    write: bool = True,
) -> None:
    """Print the tables, write the JSON (``write``) and draw the plot."""
    print()
    print(C.markdown(rows, [
        ("where", "corpus", "{}"), ("files", "shards", "{:,}"), ("s", "TarShards(...) s", "{:.3f}"),
        ("bytes_per_file", "bytes/file", "{:.0f}"), ("indexes_read", "indexes read", "{}"),
    ], numbers=True))  # fmt: skip
    if index_rows:
        print()
        print(C.markdown(index_rows, [
            ("jobs", "seekdata index -j", "{}"), ("shards", "shards", "{:,}"),
            ("s", "wall s", "{:.2f}"), ("speedup", "speed-up", "{:.2f}×"),
        ], numbers=True))  # fmt: skip
    if write:
        results = {"construction": rows, "index": index_rows, "bytes_per_file": per_file}
        out = C.write(args, results, cpus_note="shared 2-core machine")
        print(f"\nwrote {out}")

    def draw(plt: Any) -> Any:
        fig, (cost, mem) = plt.subplots(1, 2, figsize=(9, 3.6))
        for where in dict.fromkeys(r["where"] for r in rows):
            mine = sorted((r for r in rows if r["where"] == where), key=lambda r: r["files"])
            xs = [r["files"] for r in mine]
            cost.plot(xs, [r["s"] for r in mine], marker="o", label=where)
            mem.plot(xs, [(r["held_bytes"] - r["url_bytes"]) / r["files"] for r in mine],
                     marker="o", label=where)  # fmt: skip
        cost.set(xscale="log", yscale="log", xlabel="shards", ylabel="seconds",
                 title="a fresh TarShards(...) (after imports)")  # fmt: skip
        mem.set(xscale="log", yscale="log", xlabel="shards",
                ylabel="bytes held per shard (URLs aside)",
                title="memory after construction, per shard")  # fmt: skip
        for ax in (cost, mem):
            ax.grid(alpha=0.3)
        cost.legend(fontsize=8)
        return fig

    out_png = (args.from_json or pathlib.Path(args.out)).with_suffix(".png")
    C.plot(out_png, draw)


if __name__ == "__main__":
    main()
