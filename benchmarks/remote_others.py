"""MosaicML Streaming and litdata on benchmarks/remote.py's tar samples, from the same server.

Run by ``benchmarks/remote.py --compare-python PY``, where PY has both installed. They would
replace this project's torch (2.13, CPU) with a CUDA build of 2.15, so the comparison venv was
made beside it without their dependencies:

    python -m venv --system-site-packages /tmp/cmpvenv
    /tmp/cmpvenv/bin/pip install --no-deps mosaicml-streaming litdata xxhash zstd \\
        python-snappy brotli cramjam catalogue

plus a stub ``torchvision`` package there (Streaming imports torchvision's ``VisionDataset``
at import time, and PyPI's torchvision does not load against torch 2.13+cpu; no vision code
runs here). ``python remote_others.py JOB`` (JSON from remote.py) converts the samples with
each library's own writer (``streaming.MDSWriter``, ``litdata.optimize``), uploads them, and
prints JSON rows: for each library, a fresh process resuming at 90 % of the epoch — seconds
to its first batch and the requests and bytes the server sent before it — and steady samples/s
with ``workers`` workers.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import _common as C  # benchmarks/ is on sys.path when a script here runs

KEY, SECRET = "testing", "testing"


def samples(folder: str) -> list[dict[str, Any]]:
    import webdataset as wds

    urls = sorted(glob.glob(os.path.join(folder, "*.tar")))
    out = []
    for s in wds.WebDataset(urls, shardshuffle=False):
        out.append({"key": s["__key__"], "bin": s["bin"], "cls": int(s["cls"])})
    return out


def _lit_item(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def convert(job: dict[str, Any], work: pathlib.Path) -> int:
    import boto3

    items = samples(job["data"])
    from streaming import MDSWriter

    mds = work / "mds"
    with MDSWriter(out=str(mds), columns={"key": "str", "bin": "bytes", "cls": "int"},
                   size_limit="32mb") as writer:  # fmt: skip
        for item in items:
            writer.write(item)
    import litdata

    lit = work / "lit"
    litdata.optimize(fn=_lit_item, inputs=items, output_dir=str(lit), chunk_bytes="32MB",
                     num_workers=1, mode="overwrite")  # fmt: skip
    client = boto3.client("s3", endpoint_url=job["upload_endpoint"], aws_access_key_id=KEY,
                          aws_secret_access_key=SECRET, region_name="us-east-1")  # fmt: skip
    for name, folder in (("mds", mds), ("lit", lit)):
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = f"{name}/{path.relative_to(folder).as_posix()}"
                client.put_object(Bucket=job["bucket"], Key=key, Body=path.read_bytes())
    return len(items)


def proxy(job: dict[str, Any], path: str) -> dict[str, Any]:
    request = urllib.request.Request(
        job["proxy"] + path, method="POST" if "reset" in path else "GET"
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return dict(json.load(reply))


def env(job: dict[str, Any]) -> dict[str, str]:
    return {
        **os.environ,
        "S3_ENDPOINT_URL": job["endpoint"],
        "AWS_ENDPOINT_URL": job["endpoint"],
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",  # litdata downloads with obstore, which refuses http:// else
    }


# -- the child runs ----------------------------------------------------------------------


def make_loader(
    lib: str, job: dict[str, Any], cache: str, workers: int, n: int, resume: bool
) -> Any:
    batch = job["batch"]
    remote = f"s3://{job['bucket']}/{'mds' if lib == 'streaming' else 'lit'}"
    if lib == "streaming":
        from streaming import StreamingDataLoader, StreamingDataset

        ds = StreamingDataset(remote=remote, local=cache, batch_size=batch, shuffle=True,
                              shuffle_seed=0)  # fmt: skip
        if resume:
            ds.load_state_dict(ds.state_dict(int(0.9 * n) // batch * batch, True))
        return StreamingDataLoader(ds, batch_size=batch, num_workers=workers,
                                   collate_fn=lambda s: [x["bin"] for x in s])  # fmt: skip
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming import downloader

    # litdata downloads through obstore with fixed client options, which refuse the local
    # server's plain http://; allowed here (a benchmark against 127.0.0.1, nothing else changed)
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
    options = {"endpoint_url": job["endpoint"], "aws_access_key_id": KEY,
               "aws_secret_access_key": SECRET}  # fmt: skip
    ds = StreamingDataset(remote, cache_dir=cache, shuffle=True, seed=0, storage_options=options)
    loader = StreamingDataLoader(ds, batch_size=batch, num_workers=workers,
                                 collate_fn=lambda s: [x["bin"] for x in s])  # fmt: skip
    if resume:
        loader._num_samples_yielded_streaming = int(0.9 * n) // batch * batch
        state = loader.state_dict()
        loader = StreamingDataLoader(StreamingDataset(remote, cache_dir=cache, shuffle=True,
                                                      seed=0, storage_options=options),
                                     batch_size=batch, num_workers=workers,
                                     collate_fn=lambda s: [x["bin"] for x in s])  # fmt: skip
        loader.load_state_dict(state)
    return loader


def child(lib: str, mode: str, job: dict[str, Any], n: int) -> None:
    t0 = time.perf_counter()
    # their own processes may still be writing into the cache when the run ends
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as cache:
        if mode == "first":
            loader = make_loader(lib, job, cache, 0, n, resume=True)
            batch = next(iter(loader))
            print(
                json.dumps({"seconds": time.perf_counter() - t0, "items": len(batch)}), flush=True
            )
            return
        loader = make_loader(lib, job, cache, job["workers"], n, resume=False)
        it = iter(loader)
        for _ in range(job["warmup"]):
            next(it)
        t, items = time.perf_counter(), 0
        for _ in range(job["steps"]):
            items += len(next(it))
        print(json.dumps({"per_s": items / (time.perf_counter() - t)}), flush=True)


def run_child(lib: str, mode: str, job: dict[str, Any], n: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "child", lib, mode, str(n), json.dumps(job)],
        capture_output=True, text=True, timeout=3600, env=env(job),
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{lib} {mode}: {done.stderr.strip()[-1500:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    if sys.argv[1] == "child":
        _, _, lib, mode, n, text = sys.argv
        child(lib, mode, json.loads(text), int(n))
        return
    job = json.loads(sys.argv[1])
    rows = []
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as work:
        n = convert(job, pathlib.Path(work))
    for lib in ("streaming", "litdata"):
        row: dict[str, Any] = {"loader": lib, "samples": n}
        try:
            firsts, fetched = [], []
            for _ in range(job["rounds"]):
                proxy(job, "/__proxy__/reset")
                firsts.append(run_child(lib, "first", job, n)["seconds"])
                stats = proxy(job, "/__proxy__/stats")
                fetched.append((stats["requests"], stats["body_bytes"]))
            row["first_s"] = C.median(firsts)
            row["requests"], row["bytes"] = fetched[-1]
            row["per_s"] = C.median(
                [run_child(lib, "steady", job, n)["per_s"] for _ in range(job["rounds"])]
            )
        except Exception as exc:  # a library that fails here is reported, not hidden
            row["error"] = str(exc)[-500:]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    print("ROWS " + json.dumps(rows), flush=True)


if __name__ == "__main__":
    main()
