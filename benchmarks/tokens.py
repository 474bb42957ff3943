"""Token corpora: packing 1e7 documents, the cost of an item, the boundary scan.

    python benchmarks/tokens.py            # ~3 min; results/tokens.json + tokens.png
    python benchmarks/tokens.py --quick    # 1e5 documents, a few seconds

The corpus: D documents with lognormal lengths (median 300 tokens, sigma 1.2, rounded and
clipped to [1, 16384]; seed 0) packed at seq_len 2048. Its ~6e9 tokens are a *sparse* uint16
file of the right size (no bytes written; reads return zeros), so the dataset is built and read
at full scale from the documents' lengths alone.

- setup: everything ``PackedDocuments`` computes before the first batch, given the boundaries,
  as ``document_ends`` and as a boundary index on disk (written for the sparse file, eos_id 0):
  wall time, tracemalloc peak, bytes kept per document; and its ``stream_signature``, computed
  at the first ``state_dict()`` (a digest of the files' index digests, or of the given
  boundaries), then cached.
- packing, on the same lengths: the lower bound ``ceil(tokens / seq_len)``; best-fit
  decreasing over the whole corpus in one block (the FFD-class ceiling, same code); next-fit in
  corpus order (concatenate whole documents until the next does not fit); concatenate-and-cut
  (``TokenWindows``, Megatron's ``GPTDataset``): no padding, but documents split. On the
  first 1e5 documents: textbook first-fit decreasing, item by item, next to ours.
- ``ds[i]``: median µs over random sequences, and the memmap reads of the same tokens alone;
  on the sparse corpus with ``document_ends`` (its zeros are no real tokens: an index with an
  eos id would fail the end-of-document checks), and on the real file below with its boundary
  index, where every item also checks that its documents hold eos_id only as their last token.
- scan: building a boundary index (one vectorised pass) over a real 256 MB uint16 file.
- Megatron's published index-build figures, labelled as published, not measured here.
"""

from __future__ import annotations

import math
import os
import pathlib
import random
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H
from seekdata.sources.tokens import files as _files
from seekdata.sources.tokens import index as _index
from seekdata.sources.tokens import packing as _packing
from seekdata.tokens import PackedDocuments, TokenWindows

SEQ_LEN = 2048
#: Published, not measured: (what, figure, source).
MEGATRON = [
    (
        "Megatron-LM GPTDataset: building the doc-idx mapping",
        "270.6 s",
        "github.com/NVIDIA/Megatron-LM/issues/795",
    ),
    (
        "Megatron-DeepSpeed, dolma v1.7 (2T tokens, 2,419 files, seq 4096): building indices",
        "~2,000 s (~1 s per file)",
        "github.com/argonne-lcf/Megatron-DeepSpeed/pull/18",
    ),
    (
        "Megatron-LM GPTDataset, 53.5M samples at seq 2048: sample-idx + shuffle-idx mappings",
        "1.84 s + 4.84 s",
        "github.com/NVIDIA/Megatron-LM/pull/310",
    ),
]


def lengths_of(documents: int) -> np.ndarray:
    gen = np.random.default_rng(0)
    raw = np.round(gen.lognormal(math.log(300), 1.2, documents))
    return np.clip(raw, 1, 16384).astype(np.int64)


def sparse_file(directory: str, tokens: int) -> str:
    path = os.path.join(directory, "corpus.bin")
    with open(path, "wb") as f:
        f.truncate(2 * tokens)  # uint16; a hole: nothing is written
    return path


def measured(fn: Any) -> tuple[Any, float, int]:
    """``fn()``, its wall time, and its tracemalloc peak in a second run (tracing every
    allocation slows the packer's Python steps several times over, so never both at once)."""
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, seconds, peak


def signed(ds: PackedDocuments) -> float:
    """Seconds of the first ``stream_signature`` (a digest of digests; then cached)."""
    t0 = time.perf_counter()
    _ = ds.stream_signature
    return time.perf_counter() - t0


def setup_rows(path: str, lengths: np.ndarray) -> tuple[list[dict[str, Any]], Any]:
    ends = np.cumsum(lengths)
    documents = len(lengths)
    rows = []
    ds, seconds, peak = measured(
        lambda: PackedDocuments(path, SEQ_LEN, eos_id=None, document_ends=ends)
    )
    rows.append(("document_ends (in memory)", ds, seconds, peak))
    f = _files.describe(path, np.dtype(np.uint16))
    index = _index.DocIndex(f.size, f.mtime_ns, "<u2", 0, f.tokens, 0, 0, ends)
    _index._write(path + _index.INDEX_SUFFIX, index, path)
    indexed, seconds, peak = measured(lambda: PackedDocuments(path, SEQ_LEN, eos_id=0))
    rows.append(("boundary index on disk", indexed, seconds, peak))
    out = [
        {
            "boundaries from": name,
            "setup (s)": s,
            "peak (B/doc)": p / documents,
            "kept (B/doc)": d.nbytes / documents,
            "sequences": len(d),
            "padding (%)": 100 - 100 * d.utilization,
            "stream_signature, first call (s)": signed(d),
        }
        for name, d, s, p in rows
    ]
    return out, rows[0][1]  # items are read with the given boundaries: see the docstring


def next_fit(lengths: np.ndarray, rooms: list[int] | None = None) -> int:
    """Whole documents concatenated in corpus order until the next does not fit; the room
    each packed sequence is closed with goes to ``rooms``."""
    bins, room = 0, 0
    for n in lengths.tolist():
        full, rest = divmod(n, SEQ_LEN)
        bins += full
        if rest > room:
            if bins and rooms is not None:
                rooms.append(room)
            bins, room = bins + 1, SEQ_LEN
        if rest:
            room -= rest
    return bins


def first_fit_decreasing(lengths: np.ndarray) -> int:
    """The textbook, one item at a time: a max-tree over bins finds the first that fits."""
    items = sorted((n % SEQ_LEN for n in lengths.tolist() if n % SEQ_LEN), reverse=True)
    full = int((lengths // SEQ_LEN).sum())
    size = 1 << max(1, (len(items) - 1).bit_length())
    tree = [SEQ_LEN] * (2 * size)  # room of each bin (all empty), max over subtrees
    bins = 0
    for n in items:
        k = 1
        while k < size:
            k = 2 * k if tree[2 * k] >= n else 2 * k + 1
        bins = max(bins, k - size + 1)
        tree[k] -= n
        k //= 2
        while k:
            tree[k] = max(tree[2 * k], tree[2 * k + 1])
            k //= 2
    return full + bins


def split_documents(lengths: np.ndarray) -> int:
    """Documents a window boundary cuts when the corpus is concatenated and cut."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    return int(((ends - 1) // SEQ_LEN > starts // SEQ_LEN).sum())


def packing_rows(lengths: np.ndarray, ours: int) -> list[dict[str, Any]]:
    tokens = int(lengths.sum())
    rows: list[dict[str, Any]] = []

    def row(name: str, sequences: int, seconds: float | None, split: int = 0) -> None:
        used = min(tokens, sequences * SEQ_LEN)  # cut windows drop the tail instead of padding
        rows.append(
            {
                "packer": name,
                "sequences": sequences,
                "utilisation (%)": 100 * used / (sequences * SEQ_LEN),
                "padding (%)": 100 - 100 * used / (sequences * SEQ_LEN),
                "documents split": split,
                "time (s)": "" if seconds is None else seconds,
            }
        )

    row("lower bound: ceil(tokens / seq_len)", -(-tokens // SEQ_LEN), None)
    row("seekdata PackedDocuments (BFD, blocks of 65,536)", ours, None)
    t0 = time.perf_counter()
    items = lengths % SEQ_LEN
    bins = _packing.best_fit_decreasing(items[items > 0], SEQ_LEN)[1]
    whole = int((lengths // SEQ_LEN).sum()) + bins
    row("best-fit decreasing, whole corpus in one block", whole, time.perf_counter() - t0)
    t0 = time.perf_counter()
    row("next-fit in corpus order", next_fit(lengths), time.perf_counter() - t0)
    windows = (tokens - 1) // SEQ_LEN
    row("concatenate and cut (TokenWindows, Megatron)", windows, None, split_documents(lengths))
    return rows


def subsample_rows(lengths: np.ndarray) -> list[dict[str, Any]]:
    sample = lengths[:100_000]
    bounds = np.concatenate([[0], np.cumsum(sample)])
    t0 = time.perf_counter()
    ours = len(_packing.LazyPacking(_packing.Bounds(bounds), SEQ_LEN))  # counts every block
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ffd = first_fit_decreasing(sample)
    ffd_s = time.perf_counter() - t0
    tokens = int(sample.sum())
    return [
        {"packer (first 1e5 documents)": name, "sequences": n, "time (s)": s,
         "padding (%)": 100 - 100 * tokens / (n * SEQ_LEN)}
        for name, n, s in (("seekdata PackedDocuments", ours, ours_s),
                           ("first-fit decreasing, item by item", ffd, ffd_s))
    ]  # fmt: skip


def item_rows(
    ds: PackedDocuments, checked: PackedDocuments, windows: TokenWindows, count: int
) -> list[dict[str, Any]]:
    gen = random.Random(0)
    picks = [gen.randrange(len(ds)) for _ in range(count)]
    reader = ds._reader
    buffer = np.empty(SEQ_LEN + 1, dtype=np.int64)

    def reads(i: int) -> None:  # the same tokens, moved into a buffer: the memmap's share
        at = 0
        for _, start, stop in ds.locate(i):
            buffer[at : at + stop - start] = reader.read(start, stop)
            at += stop - start

    def per_call(fn: Any, items: list[int]) -> float:
        times = []
        for i in items:
            t0 = time.perf_counter()
            fn(i)
            times.append(time.perf_counter() - t0)
        return 1e6 * H.median(times)

    for i in picks[:200]:  # the pages, into the page cache
        ds[i]
    total, alone = per_call(ds.__getitem__, picks), per_call(reads, picks)
    pieces = H.median([len(ds.locate(i)) for i in picks])
    wpicks = [gen.randrange(len(windows)) for _ in range(count)]
    cpicks = [gen.randrange(len(checked)) for _ in range(count)]
    for i in cpicks[:200]:
        checked[i]
    return [
        {"dataset": "PackedDocuments", "ds[i] (us)": total, "memmap reads (us)": alone,
         "beyond the reads (us)": total - alone, "documents per item": pieces},
        {"dataset": "PackedDocuments, boundary index (real file, eos checked)",
         "ds[i] (us)": per_call(checked.__getitem__, cpicks)},
        {"dataset": "TokenWindows (with position_ids)",
         "ds[i] (us)": per_call(windows.__getitem__, wpicks)},
    ]  # fmt: skip


def real_file(tmp: str, quick: bool) -> str:
    """Random ids in [1, 50000) with eos 0 ending lognormal documents: 256 MB of uint16."""
    tokens = 1 << (22 if quick else 27)
    data = np.random.default_rng(1).integers(1, 50_000, tokens, dtype=np.uint16)
    ends = np.cumsum(lengths_of(tokens // 300))
    data[ends[ends <= tokens] - 1] = 0
    path = os.path.join(tmp, "real.bin")
    data.tofile(path)
    return path


def scan_rows(path: str) -> list[dict[str, Any]]:
    f = _files.describe(path, np.dtype(np.uint16))
    tokens = f.tokens
    t0 = time.perf_counter()
    index = _index.load_or_build(f, np.dtype(np.uint16), 0, index_dir=None)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    _index.load_or_build(f, np.dtype(np.uint16), 0, index_dir=None)
    load = time.perf_counter() - t0
    return [
        {"file (MB)": 2 * tokens / 2**20, "documents": len(index.ends), "scan + write (s)": build,
         "GB/s": 2 * tokens / build / 1e9, "load (ms)": 1e3 * load}
    ]  # fmt: skip


def plot(out: pathlib.Path, ds: PackedDocuments, lengths: np.ndarray, setup_s: float) -> None:
    """Padding per sequence, ours and next-fit's; our setup next to Megatron's published."""
    plt = H.pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    gen = random.Random(1)
    draws = (ds.locate(gen.randrange(len(ds))) for _ in range(20_000))
    ours = [SEQ_LEN - sum(stop - start for _, start, stop in pieces) for pieces in draws]
    theirs: list[int] = []
    next_fit(lengths[:200_000], theirs)
    edges = np.linspace(0, SEQ_LEN, 65)
    for pads, name in ((ours, "PackedDocuments"), (theirs[:20_000], "next-fit in corpus order")):
        a.hist(pads, bins=edges, log=True, histtype="step", lw=1.5, label=name)
    a.set(xlabel="padding tokens in a sequence", ylabel="sequences (of 20,000 drawn)",
          title=f"padding per sequence, lognormal documents, seq_len {SEQ_LEN}")  # fmt: skip
    a.legend(fontsize=8)
    names = ["seekdata: setup\n(measured)", "Megatron doc-idx\n(published)",
             "Megatron-DeepSpeed\n2,419 files (published)"]  # fmt: skip
    bars = b.bar(names, [setup_s, 270.6, 2000.0], color=["C0", "0.6", "0.6"])
    bars[1].set_hatch("//")
    bars[2].set_hatch("//")
    b.set(yscale="log", ylabel="seconds before the first batch", title="index / packing build")
    H.save(fig, out.with_suffix(".png"))


def main() -> None:
    p = H.parser(__doc__ or "", "tokens")
    p.add_argument("--documents", type=float, default=1e7, help="corpus documents (1e7)")
    args = p.parse_args()
    documents = int(1e5 if args.quick else args.documents)
    lengths = lengths_of(documents)
    with tempfile.TemporaryDirectory() as tmp:
        path = sparse_file(tmp, int(lengths.sum()))
        setup, ds = setup_rows(path, lengths)
        real = real_file(tmp, args.quick)
        windows = TokenWindows(real, SEQ_LEN, eos_id=0)
        scan = scan_rows(real)  # builds the file's boundary index
        checked = PackedDocuments(real, SEQ_LEN, eos_id=0)
        items = item_rows(ds, checked, windows, 2_000 if args.quick else 20_000)
        packing = packing_rows(lengths, len(ds))
        subsample = subsample_rows(lengths)
        print(f"{documents:,} documents, {int(lengths.sum()):,} tokens, seq_len {SEQ_LEN}\n")
        for rows in (setup, packing, subsample, items, scan):
            print(H.table(rows, list(dict.fromkeys(k for r in rows for k in r))), end="\n\n")
        published = [{"published, not measured here": w, "figure": f, "source": s}
                     for w, f, s in MEGATRON]  # fmt: skip
        print(H.table(published, list(published[0])))
        H.write(args.out, "tokens", None, documents=documents, tokens=int(lengths.sum()),
                seq_len=SEQ_LEN, setup=setup, packing=packing, subsample=subsample,
                items=items, scan=scan, published=published)  # fmt: skip
        plot(args.out, ds, lengths, setup[0]["setup (s)"])
        del ds, windows, checked


if __name__ == "__main__":
    main()
