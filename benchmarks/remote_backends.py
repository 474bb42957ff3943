"""Which filesystem layer reads byte ranges fastest: fsspec (s3fs, HTTPFileSystem) vs obstore.

Starts moto's S3 server and a uvicorn static-file server (seekdata._servers) on 127.0.0.1,
puts ``--objects`` objects of ``--size-mb`` MB in a bucket (and the same files behind the HTTP
server), then for each back-end measures, on the same objects:

- ``cold``: a fresh process that imports the back-end, makes its client and reads one 4 KiB
  range (what a spawned DataLoader worker pays once), median wall time of ``--rounds``, the
  back-ends in a new random order each round (a bare ``python -c pass``, run among them, is
  in the JSON as ``python_start_s``);
- ``small p50/p90``: latency of single 4 KiB range reads at random offsets, one at a time;
- ``small x T``: 4 KiB reads from T threads at once: requests per second;
- ``large``: MB/s of ``--large-mb`` MB range reads, one at a time, and from T threads, and
  the client's CPU seconds per GB read from T threads (this process's CPU time, every thread
  of it: the back-end's event loop or runtime included, the servers not);
- ``batch``: 64 scattered 4 KiB ranges of one object in one call of each library's batch API
  (fsspec ``cat_ranges``: one request per range, concurrently; obstore ``get_ranges``: ranges
  closer than 1 MiB coalesced), per call;
- ``fork``: whether a forked child (a DataLoader worker on Linux) can read with a new client
  after its parent read with the same library: ``ok``, or ``hangs`` (no byte within
  ``--fork-timeout`` s, default 10).

``python benchmarks/remote_backends.py`` prints the table and writes results/remote_backends.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import _common as C  # benchmarks/ is on sys.path when a script here runs
from seekdata import _servers

KIB = 1024
MB = 1_000_000
BUCKET = "bench"

Reader = Callable[[str, int, int], bytes]


def s3fs_reader(server: _servers.Server) -> tuple[Reader, Callable[..., list[bytes]]]:
    import s3fs

    fs = s3fs.S3FileSystem(
        key=_servers.S3_KEY,
        secret=_servers.S3_SECRET,
        client_kwargs={"endpoint_url": server.url, "region_name": _servers.S3_REGION},
        skip_instance_cache=True,
    )

    def read(key: str, start: int, end: int) -> bytes:
        return bytes(fs.cat_file(f"{BUCKET}/{key}", start=start, end=end))

    def batch(key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        return list(fs.cat_ranges([f"{BUCKET}/{key}"] * len(starts), starts, ends))

    return read, batch


def obstore_s3_reader(server: _servers.Server) -> tuple[Reader, Callable[..., list[bytes]]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=server.url,
        access_key_id=_servers.S3_KEY,
        secret_access_key=_servers.S3_SECRET,
        region=_servers.S3_REGION,
        client_options={"allow_http": True},
    )

    def read(key: str, start: int, end: int) -> bytes:
        return bytes(obstore.get_range(store, key, start=start, end=end))

    def batch(key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        return [bytes(b) for b in obstore.get_ranges(store, key, starts=starts, ends=ends)]

    return read, batch


def fsspec_http_reader(server: _servers.Server) -> tuple[Reader, Callable[..., list[bytes]]]:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)

    def read(key: str, start: int, end: int) -> bytes:
        return bytes(fs.cat_file(f"{server.url}/{key}", start=start, end=end))

    def batch(key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        return list(fs.cat_ranges([f"{server.url}/{key}"] * len(starts), starts, ends))

    return read, batch


def obstore_http_reader(server: _servers.Server) -> tuple[Reader, Callable[..., list[bytes]]]:
    import obstore
    from obstore.store import HTTPStore

    store = HTTPStore(server.url, client_options={"allow_http": True})

    def read(key: str, start: int, end: int) -> bytes:
        return bytes(obstore.get_range(store, key, start=start, end=end))

    def batch(key: str, starts: list[int], ends: list[int]) -> list[bytes]:
        return [bytes(b) for b in obstore.get_ranges(store, key, starts=starts, ends=ends)]

    return read, batch


#: the library each back-end needs: one not installed is left out of the run, with a note
LIBRARY = {"fsspec/s3fs": "s3fs", "fsspec/http": "fsspec", "obstore": "obstore"}

BACKENDS = {
    ("s3", "fsspec/s3fs"): s3fs_reader,
    ("s3", "obstore"): obstore_s3_reader,
    ("http", "fsspec/http"): fsspec_http_reader,
    ("http", "obstore"): obstore_http_reader,
}

COLD = {
    "fsspec/s3fs": (
        "import s3fs; fs = s3fs.S3FileSystem(key='testing', secret='testing', "
        "client_kwargs={{'endpoint_url': '{url}', 'region_name': 'us-east-1'}}); "
        "fs.cat_file('bench/{key}', start=0, end=4096)"
    ),
    "obstore": (
        "import obstore; from obstore.store import S3Store; "
        "s = S3Store('bench', endpoint='{url}', access_key_id='testing', "
        "secret_access_key='testing', region='us-east-1', client_options={{'allow_http': True}}); "
        "obstore.get_range(s, '{key}', start=0, end=4096)"
    ),
}


FORK = """
import faulthandler, os, sys
{setup}
read(0)
pid = os.fork()
if pid == 0:
    faulthandler.dump_traceback_later({timeout}, exit=True)  # a hang: status 1
    {setup_child}
    read(1)
    os._exit(0)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
FORK_SETUP = {
    "fsspec/s3fs": (
        "import s3fs\n"
        "def make(): return s3fs.S3FileSystem(key='testing', secret='testing', "
        "skip_instance_cache=True, "
        "client_kwargs={{'endpoint_url': '{url}', 'region_name': 'us-east-1'}})\n"
        "fs = make()\n"
        "def read(at): fs.cat_file('bench/{key}', start=at, end=at + 4096)"
    ),
    "obstore": (
        "import obstore; from obstore.store import S3Store\n"
        "def make(): return S3Store('bench', endpoint='{url}', access_key_id='testing', "
        "secret_access_key='testing', region='us-east-1', client_options={{'allow_http': True}})\n"
        "s = make()\n"
        "def read(at): obstore.get_range(s, '{key}', start=at, end=at + 4096)"
    ),
}


def fork_check(name: str, url: str, key: str, timeout: float = 10) -> str:
    setup = FORK_SETUP[name].format(url=url, key=key)
    code = FORK.format(setup=setup, setup_child="fs = s = make()", timeout=timeout)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    return "ok" if done.returncode == 0 else "hangs" if b"Timeout" in done.stderr else "fails"


def cold_start_s(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def offsets(count: int, size: int, span: int, salt: int) -> list[int]:
    """Deterministic scattered offsets (a multiplicative hash of the counter)."""
    top = size - span
    return [((i + 1) * 2654435761 + salt * 40503) % top for i in range(count)]


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def threaded(count: int, job: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=job, args=(t,)) for t in range(count)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def measure(
    read: Reader,
    batch: Callable[..., list[bytes]],
    args: argparse.Namespace,
    keys: list[str],
    size: int,
    expect: Callable[[str, int, int], bytes],
) -> dict[str, float]:
    small, large = 4 * KIB, args.large_mb * MB
    out: dict[str, float] = {}
    read(keys[0], 0, small)  # connect
    lat = []
    for i, off in enumerate(offsets(args.small_n, size, small, 1)):
        key = keys[i % len(keys)]
        t0 = time.perf_counter()
        data = read(key, off, off + small)
        lat.append(time.perf_counter() - t0)
        if i < 3 and data != expect(key, off, off + small):
            raise SystemExit(f"wrong bytes from {key} at {off}")
    lat.sort()
    out["small_p50_ms"] = 1e3 * lat[len(lat) // 2]
    out["small_p90_ms"] = 1e3 * lat[int(len(lat) * 0.9)]
    per = args.small_n // args.threads

    def small_job(t: int) -> None:
        for i, off in enumerate(offsets(per, size, small, 100 + t)):
            read(keys[(i + t) % len(keys)], off, off + small)

    out["small_threads_req_s"] = per * args.threads / threaded(args.threads, small_job)
    starts = offsets(args.large_n, size, large, 7)
    seconds = sum(timed(lambda o=o, i=i: read(keys[i % len(keys)], o, o + large))
                  for i, o in enumerate(starts))  # fmt: skip
    out["large_mb_s"] = args.large_n * large / MB / seconds
    lper = max(1, args.large_n // args.threads)

    def large_job(t: int) -> None:
        for i, off in enumerate(offsets(lper, size, large, 200 + t)):
            read(keys[(i + t) % len(keys)], off, off + large)

    cpu = time.process_time()  # this process's CPU, every thread's (the servers are others)
    out["large_threads_mb_s"] = lper * args.threads * large / MB / threaded(args.threads, large_job)
    gb = lper * args.threads * large / 1e9
    out["large_threads_cpu_s_gb"] = (time.process_time() - cpu) / gb
    calls = []
    for r in range(args.batch_rounds):
        bstarts = sorted(offsets(64, size, small, 300 + r))
        bends = [s + small for s in bstarts]
        calls.append(timed(lambda s=bstarts, e=bends: batch(keys[0], s, e)))
    out["batch64_ms"] = 1e3 * statistics.median(calls)
    return out


def main() -> None:
    parser = C.parser(__doc__, "remote_backends", rounds=5)
    parser.add_argument("--objects", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--small-n", type=int, default=400, help="4 KiB reads per measure")
    parser.add_argument("--large-mb", type=int, default=8)
    parser.add_argument("--large-n", type=int, default=24)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch-rounds", type=int, default=20)
    parser.add_argument(
        "--fork-timeout", type=float, default=10.0,
        help="s a forked child may wait for its first byte before it counts as a hang (10)",
    )  # fmt: skip
    # --rounds (cold starts) was --cold-rounds: the old spelling still works
    parser.add_argument("--cold-rounds", type=int, dest="rounds", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.objects, args.size_mb, args.small_n, args.large_n = 2, 20, 80, 6
        args.batch_rounds, args.rounds = 5, 2
    size = args.size_mb * MB
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        data = pathlib.Path(folder)
        keys = [f"obj-{i}.bin" for i in range(args.objects)]
        blobs = {}
        for i, key in enumerate(keys):
            block = bytes(range(256)) * (MB // 256 + 1)
            blob = (block[i:] + block[:i]) * (size // len(block) + 1)
            blobs[key] = blob[:size]
            (data / key).write_bytes(blobs[key])

        def expect(key: str, start: int, end: int) -> bytes:
            return blobs[key][start:end]

        with _servers.s3_server() as s3, _servers.http_server(data) as http:
            t0 = time.perf_counter()
            _servers.upload(s3, BUCKET, data)
            print(f"  uploaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            missing = sorted(n for n, lib in LIBRARY.items() if not importlib.util.find_spec(lib))
            if missing:
                print(f"  left out, not installed: {', '.join(missing)}", file=sys.stderr)
            codes = {n: COLD[n].format(url=s3.url, key=keys[0]) for n in COLD if n not in missing}
            codes["python"] = "pass"  # the interpreter's own start, among the others
            cases = {name: lambda code=code: cold_start_s(code) for name, code in codes.items()}
            starts = C.rounds(cases, args.rounds)
            for (kind, name), make in BACKENDS.items():
                if name in missing:
                    continue
                read, batch = make(s3 if kind == "s3" else http)
                row: dict[str, Any] = {"server": kind, "backend": name}
                row.update(measure(read, batch, args, keys, size, expect))
                if kind == "s3":
                    row["cold_s"] = starts[name]["median"]
                    row["fork"] = fork_check(row["backend"], s3.url, keys[0], args.fork_timeout)
                rows.append(row)
                print(f"  {kind:4} {name:12} done", file=sys.stderr)
    columns = [
        ("server", "server", "{}"),
        ("backend", "back-end", "{}"),
        ("cold_s", "cold start s", "{:.2f}"),
        ("small_p50_ms", "4K p50 ms", "{:.2f}"),
        ("small_p90_ms", "4K p90 ms", "{:.2f}"),
        ("small_threads_req_s", f"4K ×{args.threads} req/s", "{:.0f}"),
        ("large_mb_s", f"{args.large_mb}MB MB/s", "{:.0f}"),
        ("large_threads_mb_s", f"{args.large_mb}MB ×{args.threads} MB/s", "{:.0f}"),
        ("large_threads_cpu_s_gb", f"{args.large_mb}MB ×{args.threads} CPU s/GB", "{:.2f}"),
        ("batch64_ms", "64×4K batch ms", "{:.1f}"),
        ("fork", "after fork", "{}"),
    ]
    print(C.markdown(rows, columns))
    versions = {m: _version(m) for m in ("s3fs", "fsspec", "obstore", "moto", "uvicorn")}
    out = C.write(args, {"rows": rows}, python_start_s=starts["python"]["median"],
                  versions=versions)  # fmt: skip
    print(f"wrote {out}")


def _version(module: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    main()
