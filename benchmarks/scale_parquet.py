"""A fresh ParquetRows over 10^2 … 10^4 tiny files, local and on an S3 server, with and without
the folder's manifest: what building it costs against the number of files.

Each file is the same tiny Parquet file (4 rows in 2 row groups, about 1 KB): what is measured is
the per-file cost of a start, not decoding. For each count the files are written (local) or put
(a moto S3 server on 127.0.0.1, seekdata._servers) once, their manifest written from
``seekdata.sources.parquet.footers.manifest_entry`` (what ``seekdata index`` writes), and then,
in one process after its imports, a fresh ``ParquetRows(pattern)`` is timed:

- ``manifest``: found beside the files (one read per folder, no footer);
- ``footers``: ``manifest=False``, today's way without one (every footer read; remote ones
  concurrently, one request each);

each ``--rounds`` times, the cases interleaved in a new order every round, the median reported.
``bytes/file``: tracemalloc's memory of a dataset built from its manifest, held after the build
and at its peak (the manifest's JSON parse included), less the file names the user passed; the
slope between the smallest and the largest count (a fixed cost, such as the S3 client's, drops
out).

``python benchmarks/scale_parquet.py`` prints the table and writes results/scale_parquet.json
and a plot beside it; ``--quick`` runs 100 and 1,000 local files and 100 remote ones.
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

BUCKET = "scale-parquet"


def tiny_parquet() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(range(4), pa.int64()), "x": pa.array([0.5] * 4, pa.float32())})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=2)
    return sink.getvalue().to_pybytes()


def index(names: list[str], folder: str, stores: Any) -> None:
    """The folder's manifest, as ``seekdata index`` writes it."""
    from seekdata.sources.files import manifest
    from seekdata.sources.parquet import footers

    entries = [footers.manifest_entry(n, stores=stores) for n in names]
    rows, sections = footers.intern_schemas(entries)
    manifest.write(folder, footers.FAMILY, rows, {}, stores=stores, sections=sections)


def build(pattern: str, **kwargs: Any) -> Callable[[], float]:
    from seekdata.parquet import ParquetRows

    def run() -> float:
        import time

        start = time.perf_counter()
        ParquetRows(pattern, **kwargs)
        return time.perf_counter() - start

    return run


def memory(pattern: str, n: int, **kwargs: Any) -> tuple[int, int]:
    """tracemalloc's (peak while building, still held after) of a dataset over ``n`` files
    built from their manifest, less its file names (the URL strings the user passed)."""
    from seekdata.parquet import ParquetRows

    tracemalloc.start()
    ds = ParquetRows(pattern, **kwargs)
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(ds) == 4 * n
    names = sum(sys.getsizeof(f) for f in ds._names) + sys.getsizeof(ds._names)
    return peak - names, now - names


def main() -> None:
    p = C.parser(__doc__, "scale_parquet")
    p.add_argument("--local", default="100,1000,10000", help="local file counts")
    p.add_argument("--s3", default="100,1000", help="S3 file counts (moto takes ~8 ms a PUT)")
    args = p.parse_args()
    local = [100, 1000] if args.quick else [int(x) for x in args.local.split(",") if x]
    remote = [100] if args.quick else [int(x) for x in args.s3.split(",") if x]
    data = tiny_parquet()
    rows: list[dict[str, Any]] = []
    root = pathlib.Path(tempfile.mkdtemp(prefix="seekdata-scale-parquet-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        from seekdata import _servers
        from seekdata.sources.remote import Stores

        cases: dict[str, Callable[[], float]] = {}
        patterns: dict[tuple[str, int], tuple[str, dict[str, Any]]] = {}
        for n in local:
            folder = root / f"n{n}"
            folder.mkdir()
            names = [str(folder / f"p-{k:05d}.parquet") for k in range(n)]
            for name in names:
                pathlib.Path(name).write_bytes(data)
            index(names, str(folder), Stores({}))
            pattern = str(folder / f"p-{{00000..{n - 1:05d}}}.parquet")
            patterns["local", n] = (pattern, {})
        if remote:
            server = stack.enter_context(_servers.s3_server())
            client = _servers.s3_client(server)
            client.create_bucket(Bucket=BUCKET)
            options = _servers.s3_options(server)
            for n in remote:
                keys = [f"n{n}/p-{k:05d}.parquet" for k in range(n)]
                for key in keys:
                    client.put_object(Bucket=BUCKET, Key=key, Body=data)
                index([f"s3://{BUCKET}/{k}" for k in keys], f"s3://{BUCKET}/n{n}", Stores(options))
                pattern = f"s3://{BUCKET}/n{n}/p-{{00000..{n - 1:05d}}}.parquet"
                patterns["S3", n] = (pattern, {"storage_options": options})
        for (where, n), (pattern, kwargs) in patterns.items():
            cases[f"{where} {n} manifest"] = build(pattern, **kwargs)
            cases[f"{where} {n} footers"] = build(pattern, manifest=False, **kwargs)
        for case in cases.values():
            case()  # once first: imports, the store's client, the page cache
        times = C.rounds(cases, args.rounds)
        for (where, n), (pattern, kwargs) in patterns.items():
            row: dict[str, Any] = {"where": where, "files": n}
            for way in ("manifest", "footers"):
                row[way] = times[f"{where} {n} {way}"]["median"]
                row[f"{way}_runs"] = times[f"{where} {n} {way}"]["runs"]
            row["peak_bytes"], row["held_bytes"] = memory(pattern, n, **kwargs)
            rows.append(row)
        for where in dict.fromkeys(r["where"] for r in rows):
            mine = [r for r in rows if r["where"] == where]
            if len(mine) > 1:  # the slope between the smallest and the largest count
                a, b = mine[0], mine[-1]
                for key in ("peak", "held"):
                    slope = (b[f"{key}_bytes"] - a[f"{key}_bytes"]) / (b["files"] - a["files"])
                    b[f"{key}_per_file"] = slope
    columns: list[C.Column] = [
        ("where", "files", lambda r: f"{r['where']}, {r['files']:,} files"),
        ("manifest", "with the manifest", "{:.3f} s"),
        ("footers", "footers (manifest=False)", "{:.3f} s"),
        ("held_per_file", "bytes/file held (manifest)", "{:.0f}"),
        ("peak_per_file", "bytes/file at peak (manifest)", "{:.0f}"),
    ]
    print(f"a fresh ParquetRows, median of {args.rounds} rounds")
    print(C.markdown(rows, columns))
    out = C.write(args, {"rows": rows})

    def draw(plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(6, 4))
        for where in dict.fromkeys(r["where"] for r in rows):
            mine = [r for r in rows if r["where"] == where]
            for way, style in (("manifest", "-o"), ("footers", "--s")):
                label = f"{where}, {way}"
                ax.plot([r["files"] for r in mine], [r[way] for r in mine], style, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("Parquet files")
        ax.set_ylabel("seconds to build ParquetRows")
        ax.legend()
        return fig

    C.plot(out.with_suffix(".png"), draw)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
