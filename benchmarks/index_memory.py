"""Peak memory and time of ``seekdata index`` over remote tar shards, against the shard count.

Starts an S3 server on 127.0.0.1 (moto by default, ``--s3-server seaweedfs``; see
seekdata._servers), puts the largest count of tiny shards in a bucket (4 samples of
100 bytes each: what is measured is the per-shard cost, not the scan), then for each count
runs, each as a fresh process reached through the environment (``AWS_ENDPOINT_URL``, as a user
without ``--storage-option`` would):

- ``command``: ``python -m seekdata index --force --index-dir TMP 's3://…/s{000000..N}.tar'``;
- ``TarShards``: ``seekdata.wds.TarShards`` over the same URLs (the library, for comparison);
- ``command @ SRC`` with ``--before SRC``: the command from another checkout's ``src`` folder
  (``git archive COMMIT src | tar -x -C DIR`` gives one), to compare a fix with what it fixed.

Peak RSS is the child's own (``wait4``'s ``ru_maxrss``), time its wall time; ``MB/shard`` is
the slope of peak RSS between the smallest and the largest count.

``python benchmarks/index_memory.py`` prints the table and writes results/index_memory.json
and a plot beside it; ``--quick`` runs 10 and 40 shards.
"""

from __future__ import annotations

import io
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Any

from seekdata import _servers

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness as H  # noqa: E402

BUCKET = "index-memory"
_LIBRARY = (
    "import sys; from seekdata.wds import TarShards; "
    "print(len(TarShards(sys.argv[1], index_dir=sys.argv[2])))"
)


def tar_bytes(shard: int, samples: int = 4, size: int = 100) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for k in range(samples):
            info = tarfile.TarInfo(f"s{shard:06d}_{k}.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes([k]) * size))
    return out.getvalue()


def child(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, float, str]:
    """Run ``argv``: (peak RSS in MB, wall seconds, stderr's tail); a failure raises."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        took = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-800:]
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode} after {took:.0f} s: {tail}")
    return usage.ru_maxrss / 1024, took, tail


def main() -> None:
    p = H.script_parser(__doc__.splitlines()[0], H.RESULTS / "index_memory.json")
    p.add_argument("--shards", default="25,100,400", help="shard counts (default 25,100,400)")
    p.add_argument("--s3-server", choices=sorted(_servers.S3_SERVERS), default="moto")
    p.add_argument(
        "--before", metavar="SRC", help="also run the command from this src folder (the old code)"
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (default 1800)")
    args = p.parse_args()
    counts = [10, 40] if args.quick else sorted(int(x) for x in args.shards.split(","))
    variants: list[tuple[str, str | None]] = [("command", None), ("TarShards", None)]
    if args.before:
        variants.append((f"command @ {args.before}", str(pathlib.Path(args.before).resolve())))

    rows: list[dict[str, Any]] = []
    with _servers.S3_SERVERS[args.s3_server]() as server:
        client = _servers.s3_client(server)
        client.create_bucket(Bucket=BUCKET)
        for i in range(max(counts)):
            client.put_object(Bucket=BUCKET, Key=f"s{i:06d}.tar", Body=tar_bytes(i))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=server.url,
            AWS_ACCESS_KEY_ID=_servers.S3_KEY,
            AWS_SECRET_ACCESS_KEY=_servers.S3_SECRET,
            AWS_DEFAULT_REGION=_servers.S3_REGION,
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )
        for n in counts:
            pattern = f"s3://{BUCKET}/s{{000000..{n - 1:06d}}}.tar"
            for name, src in variants:
                index_dir = tempfile.mkdtemp(prefix="seekdata-index-memory-")
                try:
                    if name == "TarShards":
                        argv = [sys.executable, "-c", _LIBRARY, pattern, index_dir]
                    else:
                        argv = [sys.executable, "-m", "seekdata", "index", "--force"]
                        argv += ["--index-dir", index_dir, pattern]
                    run_env = dict(env)
                    if src is not None:
                        run_env["PYTHONPATH"] = os.pathsep.join(
                            [src, *filter(None, [env.get("PYTHONPATH")])]
                        )
                    rss, took, _ = child(argv, run_env, args.timeout)
                finally:
                    shutil.rmtree(index_dir, ignore_errors=True)
                row = {"variant": name, "shards": n, "peak_rss_mb": rss, "wall_s": took}
                rows.append(row)
                print(f"{name:>12}  {n:>6} shards  {rss:8.0f} MB  {took:7.1f} s", flush=True)

    slopes = {}
    for name, _ in variants:
        mine = [r for r in rows if r["variant"] == name]
        first, last = mine[0], mine[-1]
        if last["shards"] > first["shards"]:
            slope = (last["peak_rss_mb"] - first["peak_rss_mb"]) / (
                last["shards"] - first["shards"]
            )
            slopes[name] = slope
            for r in mine:
                r["mb_per_shard"] = slope
    print()
    print(H.table(rows, ["variant", "shards", "peak_rss_mb", "wall_s", "mb_per_shard"]))
    H.write(
        args.out,
        "index_memory",
        rows,
        s3_server=args.s3_server,
        shard_bytes=len(tar_bytes(0)),
        before=args.before,
        mb_per_shard=slopes,
        command=" ".join(sys.argv),
    )
    plot(rows, [name for name, _ in variants], args.out.with_suffix(".png"), args.s3_server)


def plot(rows: list[dict[str, Any]], names: list[str], out: pathlib.Path, server: str) -> None:
    try:
        plt = H.pyplot()
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -e '.[bench]')")
        return
    fig, (mem, wall) = plt.subplots(1, 2, figsize=(9, 3.6))
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        xs = [r["shards"] for r in mine]
        mem.plot(xs, [r["peak_rss_mb"] for r in mine], marker="o", label=name)
        wall.plot(xs, [r["wall_s"] for r in mine], marker="o", label=name)
    mem.set(xlabel="shards", ylabel="peak RSS (MB)", title="peak memory")
    wall.set(xlabel="shards", ylabel="wall time (s)", title="time")
    for ax in (mem, wall):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    mem.legend(fontsize=8)
    fig.suptitle(f"seekdata index over s3:// ({server} on 127.0.0.1), tiny shards", fontsize=10)
    H.save(fig, out)


if __name__ == "__main__":
    main()
