"""Small corpora of every file-backed kind, local and in a bucket, and the loaders the remote
tests compare (tests/sources/remote/, tests/sources/parquet/, tests/scripts/_remote_job.py).

Each kind is made once under a folder: tar shards, token files, Parquet files. ``dataset``
opens one from local paths or from URLs; ``make_loader`` wraps it in seekdata's loader with the
collate the kind needs (keys and bytes for tar shards, ``dict`` for Parquet columns).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import seekdata

SEED = 5
KINDS = ("tar", "windows", "packed", "parquet")
#: files of each kind, and how their names are written as one brace pattern
FILES = {
    "tar": ("train-{i:02d}.tar", "train-{{00..{last:02d}}}.tar", 6),
    "windows": ("tok-{i}.bin", "tok-{{0..{last}}}.bin", 3),
    "packed": ("tok-{i}.bin", "tok-{{0..{last}}}.bin", 3),
    "parquet": ("rows-{i:05d}-of-00003.parquet", "rows-{{00000..{last:05d}}}-of-00003.parquet", 3),
}
SEQ_LEN, EOS = 32, 0


def write(kind: str, folder: pathlib.Path, *, sample_bytes: int = 600) -> None:
    """The corpus of ``kind`` under ``folder`` (deterministic)."""
    gen = np.random.default_rng(7)
    name, _, count = FILES[kind]
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "tar":
        import webdataset as wds

        n = 0
        for i in range(count):
            with wds.TarWriter(str(folder / name.format(i=i))) as sink:
                for _ in range(9 + 3 * (i % 3)):  # 9, 12, 15 samples: uneven shards
                    size = int(gen.integers(sample_bytes // 2, sample_bytes))
                    sink.write({"__key__": f"k{n:05d}", "bin": gen.bytes(size), "cls": n % 7})
                    n += 1
    elif kind in ("windows", "packed"):
        for i in range(count):
            lengths = gen.integers(3, 50, 30)
            docs = [np.append(gen.integers(1, 1000, k - 1), EOS) for k in lengths]
            np.concatenate(docs).astype(np.uint16).tofile(folder / name.format(i=i))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        for i in range(count):
            rows = 150 + 40 * i
            ids = np.arange(rows, dtype=np.int64) + 1000 * i
            table = pa.table(
                {
                    "id": ids,
                    "x": gen.random(rows).astype(np.float32),
                    "text": [f"row {v}" for v in ids.tolist()],
                    "vec": pa.FixedSizeListArray.from_arrays(
                        pa.array(gen.integers(0, 100, 4 * rows).astype(np.int16)), 4
                    ),
                    # incompressible bytes: files larger than the 64 KiB read with the footer
                    "pad": [gen.bytes(500) for _ in range(rows)],
                }
            )
            pq.write_table(table, folder / name.format(i=i), row_group_size=32)


def pattern(kind: str, prefix: str) -> str:
    """The brace pattern of ``kind``'s files under ``prefix`` (a folder or a bucket URL)."""
    _, brace, count = FILES[kind]
    return f"{prefix.rstrip('/')}/" + brace.format(last=count - 1)


def dataset(kind: str, urls: str, **options: Any) -> Any:
    """The dataset of ``kind`` over ``urls``; ``options`` go to its constructor."""
    if kind == "tar":
        from seekdata.wds import TarShards

        return TarShards(urls, **options)
    if kind == "windows":
        from seekdata.tokens import TokenWindows

        return TokenWindows(urls, SEQ_LEN, eos_id=EOS, **options)
    if kind == "packed":
        from seekdata.tokens import PackedDocuments

        return PackedDocuments(urls, SEQ_LEN, eos_id=EOS, **options)
    from seekdata.parquet import ParquetRows

    return ParquetRows(urls, **options)


def collate_tar(samples: list[dict[str, Any]]) -> dict[str, Any]:
    data = [torch.frombuffer(bytearray(s["bin"]), dtype=torch.uint8) for s in samples]
    return {
        "key": [s["__key__"] for s in samples],
        "len": torch.tensor([len(s["bin"]) for s in samples]),
        "bin": torch.nn.utils.rnn.pad_sequence(data, batch_first=True),
        "cls": [s["cls"] for s in samples],
    }


def make_loader(
    kind: str,
    ds: Any,
    *,
    batch_size: int = 8,
    num_workers: int = 0,
    world: int = 1,
    rank: int = 0,
    order: str | None = None,
) -> seekdata.StatefulDataLoader:
    """seekdata's loader over ``ds`` (order ``"shards"`` for tar and Parquet by default)."""
    if order is None:
        order = "shards" if kind in ("tar", "parquet") else "feistel"
    sampler = seekdata.DistributedSampler(ds, world, rank, order=order, seed=SEED)
    collate: Callable[..., Any] | None = {"tar": collate_tar, "parquet": dict}.get(kind)
    return seekdata.StatefulDataLoader(
        ds,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        seed=SEED,
    )


def digest(batch: Any) -> str:
    """A digest of one batch's contents (tensors by bytes, the rest by repr)."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            h.update(str((value.dtype, tuple(value.shape))).encode())
            h.update(value.contiguous().numpy().tobytes())
        elif isinstance(value, dict):
            for k in value:
                h.update(repr(k).encode())
                feed(value[k])
        elif isinstance(value, list | tuple):
            for v in value:
                feed(v)
        else:
            h.update(repr(value).encode())

    feed(batch)
    return h.hexdigest()[:16]


def rows_of(kind: str, batch: Any) -> list[str]:
    """The items of one batch, each as a digest: to compare batches across world sizes."""
    if kind == "tar":
        pairs = zip(batch["key"], batch["len"].tolist(), batch["bin"], strict=True)
        return [f"{k}:{n}:{digest(b[:n])}" for k, n, b in pairs]
    if kind == "parquet":
        return [f"{i}:{t}" for i, t in zip(batch["id"].tolist(), batch["text"], strict=True)]
    return [digest(row) for row in batch["input_ids"]]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def stream(loader: Any, epochs: int = 2) -> list[Any]:
    """Every batch ``loader`` gives in ``epochs`` epochs (``seekdata.testing.run_loop``)."""
    from seekdata.testing import run_loop

    out: list[Any] = []
    run_loop(loader, range(epochs), lambda b, *_: out.append(b) if b is not None else None)
    return out
