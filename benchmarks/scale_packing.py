"""PackedDocuments over 10^8 indexed documents: construction time and memory, first batch.

    python benchmarks/scale_packing.py                      # 1e8 documents; ~1 GB of indexes
    python benchmarks/scale_packing.py --quick              # 2e6 documents, a few seconds
    python benchmarks/scale_packing.py --before ../main/src # and the release before, same corpus

The corpus: ``--files`` token files (1,000) of ``--docs`` documents each (1e5), lognormal
lengths (median 300 tokens, sigma 1.2, clipped to [1, 16384], seed 0; ~6e10 tokens) at seq_len
2048. The token files are *sparse* files of the right size; their document indexes are written
in full (8 bytes a document), and so is the folder's manifest with its packing section, as
``seekdata index --eos-id 1 --seq-len 2048`` writes them (that step's block counting is timed
too). The first batch's documents (8 sequences of a shuffled epoch) are then written for real
(eos_id 1 ends each, 2 inside), since every item checks its documents' eos tokens, and the
files' mtimes put back: nothing else is read, so nothing else need hold tokens.

Each case runs in a fresh process, after its imports: the construction's wall time (median of
``--rounds``), its RSS growth and tracemalloc peak (a second construction, traced), and the
first batch of a ``StatefulDataLoader`` (shuffled, 8 sequences: packing its blocks, reading
their files' indexes and the tokens). Cases: with the manifest (this release's default); with
``manifest=False`` (every index read, every block packed once to count it); and, with
``--before``, the release at that source tree (every index read, the corpus packed at
construction: ~11 bytes a document).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _common as C

SEQ_LEN, EOS, BATCH = 2048, 1, 8


def lengths_of(documents: int, seed: int) -> np.ndarray:
    raw = np.round(np.random.default_rng(seed).lognormal(math.log(300), 1.2, documents))
    return np.clip(raw, 1, 16384).astype(np.int64)


def build_corpus(folder: pathlib.Path, files: int, docs: int) -> dict[str, Any]:
    """Sparse token files, their full document indexes, and the manifest with its packing."""
    from seekdata.sources.files import manifest as _manifest
    from seekdata.sources.tokens import index as _index

    names, rows, indexes = [], [], []
    for k in range(files):
        lengths = lengths_of(docs, k)
        ends = np.cumsum(lengths)
        path = folder / f"part-{k:04d}.bin"
        with open(path, "wb") as f:
            f.truncate(2 * int(ends[-1]))  # uint16; a hole: nothing is written
        st = path.stat()
        index = _index.DocIndex(st.st_size, st.st_mtime_ns, "<u2", EOS, int(ends[-1]), 0,
                                50_000, ends)  # fmt: skip
        pathlib.Path(str(path) + _index.INDEX_SUFFIX).write_bytes(_index._encode(index, path.name))
        names.append(str(path))
        rows.append(_index.manifest_entry(index, path.name))
        indexes.append(index)
    t0 = time.perf_counter()
    packing = _index.packing_section(indexes, [SEQ_LEN], jobs=os.cpu_count() or 1)
    counting = time.perf_counter() - t0
    params = _index.manifest_params(np.dtype(np.uint16), EOS)
    _manifest.write(str(folder), "tokens", rows, params, sections={"packing": packing})
    return {"names": names, "counting_s": counting}


def write_first_batch(names: list[str]) -> list[int]:
    """Write the tokens of the first batch's documents (and the eos before each), keeping
    the files' mtimes; returns the batch's sequence numbers."""
    import seekdata
    from seekdata.tokens import PackedDocuments

    ds = PackedDocuments(names, SEQ_LEN, eos_id=EOS)
    loader = seekdata.StatefulDataLoader(ds, batch_size=BATCH, shuffle=True, seed=0)
    picks = loader.sampler.indices(0, np.arange(BATCH)).tolist()
    reader = ds._reader
    for i in picks:
        for s in ds._packing.segments(i):
            first, stop = s.doc_start, s.doc_stop
            for a, b, value in (
                (first - 1, stop, 2),
                (first - 1, first, EOS),
                (stop - 1, stop, EOS),
            ):
                a = max(a, 0)
                while a < b:
                    k = reader.file_at(a)
                    end = min(b, reader.starts[k + 1])
                    f = reader.files[k]
                    st = os.stat(f.path)
                    tokens = np.memmap(f.path, dtype=np.uint16, mode="r+")
                    tokens[a - reader.starts[k] : end - reader.starts[k]] = value
                    tokens.flush()
                    del tokens
                    os.utime(f.path, ns=(st.st_atime_ns, st.st_mtime_ns))
                    a = end
    return picks


def child(job: dict[str, Any]) -> dict[str, Any]:
    """One case, in this fresh process: construction (timed, then traced), the first batch."""
    import inspect
    import tracemalloc

    import seekdata
    from seekdata.tokens import PackedDocuments

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    names = job["names"]
    kwargs = {}
    if "manifest" in inspect.signature(PackedDocuments).parameters:
        kwargs["manifest"] = None if job["manifest"] else False
    times = []
    before = rss()
    for _ in range(job["rounds"]):
        t0 = time.perf_counter()
        ds = PackedDocuments(names, SEQ_LEN, eos_id=EOS, **kwargs)
        times.append(time.perf_counter() - t0)
        grown = rss() - before
        if _ != job["rounds"] - 1:
            del ds
    loader = seekdata.StatefulDataLoader(ds, batch_size=BATCH, shuffle=True, seed=0)
    t0 = time.perf_counter()
    batch = next(iter(loader))
    first = time.perf_counter() - t0
    picks = loader.sampler.indices(0, np.arange(BATCH)).tolist()
    del loader, batch, ds
    tracemalloc.start()
    ds = PackedDocuments(names, SEQ_LEN, eos_id=EOS, **kwargs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"construct_s": C.median(times), "runs": times, "rss_MB": grown / 2**20,
            "traced_peak_MB": peak / 2**20, "first_batch_s": first, "sequences": len(ds),
            "documents": ds.num_documents, "picks": picks}  # fmt: skip


def run_child(src: str, job: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"case failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    p = C.parser(__doc__ or "", "scale_packing", rounds=3)
    p.add_argument("--files", type=int, default=1000, help="token files (1000)")
    p.add_argument("--docs", type=float, default=1e5, help="documents per file (1e5)")
    p.add_argument("--before", help="a source tree (its src/) of the release to compare with")
    p.add_argument("--dir", type=pathlib.Path, help="where to write the corpus (a temp dir)")
    p.add_argument("--child", help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    files, docs = (20, 100_000) if args.quick else (args.files, int(args.docs))
    here = str(pathlib.Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, here)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t0 = time.perf_counter()
        corpus = build_corpus(pathlib.Path(tmp), files, docs)
        built = time.perf_counter() - t0
        picks = write_first_batch(corpus["names"])
        cases = [("this release, with the manifest", here, True, args.rounds),
                 ("this release, manifest=False", here, False, 1)]  # fmt: skip
        if args.before:
            cases.append(("release before (--before)", args.before, False, 1))
        rows = []
        for name, src, manifest, rounds in cases:
            job = {"names": corpus["names"], "manifest": manifest, "rounds": rounds}
            out = run_child(src, job)
            assert out["picks"] == picks  # the same sequences, so the same first batch
            rows.append({"case": name, **out})
            print(f"  {name}: {out['construct_s']:.3f} s", flush=True)
    documents = files * docs
    print(f"\n{documents:,} documents in {files:,} files, seq_len {SEQ_LEN}; corpus written in "
          f"{built:.0f} s, of which the packing counts (seekdata index --seq-len, "
          f"{os.cpu_count()} processes) {corpus['counting_s']:.1f} s\n")  # fmt: skip
    columns: list[C.Column] = [
        ("case", "case", "{}"),
        ("construct_s", "construction (s, median)", "{:.3f}"),
        ("rss_MB", "RSS growth (MB)", "{:.1f}"),
        ("traced_peak_MB", "tracemalloc peak (MB)", "{:.1f}"),
        ("first_batch_s", "first batch (s)", "{:.3f}"),
        ("sequences", "sequences", "{:,}"),
    ]
    print(C.markdown(rows, columns, numbers=True))
    for row in rows:
        row.pop("picks")
    out = C.write(args, {"documents": documents, "files": files, "seq_len": SEQ_LEN,
                         "counting_s": corpus["counting_s"], "rows": rows})  # fmt: skip
    C.plot(out.with_suffix(".png"), lambda plt: draw(plt, rows, documents))
    print(f"\nwrote {out}")


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def draw(plt: Any, rows: list[dict[str, Any]], documents: int) -> Any:
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    names = [r["case"].replace(", ", ",\n") for r in rows]
    for ax, key, label, target in (
        (axes[0], "construct_s", "construction (s)", 1.0),
        (axes[1], "rss_MB", "RSS growth (MB)", 100.0),
        (axes[2], "first_batch_s", "first batch (s)", 0.5),
    ):
        ax.bar(names, [r[key] for r in rows], color=["C0", "C1", "0.6"][: len(rows)])
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target {target:g}")
        ax.set(yscale="log", ylabel=label)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7)
    fig.suptitle(f"PackedDocuments over {documents:.0e} indexed documents, seq_len {SEQ_LEN}")
    return fig


if __name__ == "__main__":
    main()
