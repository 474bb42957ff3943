"""Token windows in shard-local order from the S3 server: the local stream, read by streaming.

``TokenWindows(shard_windows=)`` cuts the windows into shards of consecutive windows, so
``order="shards"`` reads a few contiguous byte ranges at a time: the remote corpus gives the
local stream at every step and resumes exactly from 2 workers to 0, and an epoch reads each
byte about once (counted at the server). What it costs against a global shuffle, which reads
range by range, is measured by benchmarks/remote.py (docs/remote.md).
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

import seekdata
from seekdata import _servers
from seekdata.testing import assert_exact_resume, first_difference
from seekdata.tokens import PackedDocuments, TokenWindows
from tests.helpers.remote_corpus import stream as _stream

BUCKET = "token-shards"
SEQ_LEN, SHARD = 256, 64  # windows of 514 bytes, shards of 32 KiB
FILES = 3
TOKENS = 120_000  # per file: 240 KB, 468 windows a file


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> pathlib.Path:
    root = tmp_path_factory.mktemp("token-shards")
    gen = np.random.default_rng(11)
    (root / "tok").mkdir()
    for i in range(FILES):
        gen.integers(0, 50_000, TOKENS, dtype=np.uint16).tofile(root / "tok" / f"tok-{i}.bin")
    _servers.upload(s3_server, BUCKET, root)
    return root / "tok"


def stream(ld: seekdata.StatefulDataLoader) -> list[Any]:
    return _stream(ld, 1)


def windows(urls: str, **options: Any) -> TokenWindows:
    return TokenWindows(urls, SEQ_LEN, shard_windows=SHARD, **options)


def loader(ds: TokenWindows, order: str = "shards", **kw: Any) -> seekdata.StatefulDataLoader:
    sampler = seekdata.DistributedSampler(ds, 1, 0, order=order, seed=3)
    return seekdata.StatefulDataLoader(ds, batch_size=32, sampler=sampler, seed=3, **kw)


def test_remote_shards_give_the_local_stream_and_resume_exactly(
    folder: pathlib.Path, proxy: Any
) -> None:
    local = windows(f"{folder}/tok-{{0..2}}.bin")
    ds = windows(f"s3://{BUCKET}/tok/tok-{{0..2}}.bin", storage_options=_servers.s3_options(proxy))
    assert ds.shard_sizes == local.shard_sizes and ds.stream_signature == local.stream_signature
    a, b = stream(loader(local)), stream(loader(ds))
    assert len(a) == len(b) == -(-len(local) // 32)
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"
    assert_exact_resume(
        lambda **kw: loader(ds, **{"num_workers": 2, **kw}),
        stop_at=(0, 1, 20, len(a) - 1),
        resume_kwargs={"num_workers": 0},
    )


def test_an_epoch_in_shard_order_reads_each_byte_about_once(
    folder: pathlib.Path, proxy: Any
) -> None:
    """A shard-local epoch streams the files: its requests carry each byte about once
    (counted at the server). One worker: a process of its own, whose memory of fetched bytes
    starts empty."""
    url = f"s3://{BUCKET}/tok/tok-{{0..2}}.bin"
    ds = windows(url, storage_options=_servers.s3_options(proxy))
    proxy.reset()
    assert len(stream(loader(ds, num_workers=1))) > 40
    assert 0 < proxy.stats()["body_bytes"] <= 2 * FILES * TOKENS * 2


def test_remote_packed_blocks_give_the_local_stream(folder: pathlib.Path, proxy: Any) -> None:
    """PackedDocuments(sharded=True) from the bucket, in shard-local order: the local stream
    (its index built by one scan of each object, kept beside it)."""
    opts = {"eos_id": 7, "sharded": True}
    local = PackedDocuments(f"{folder}/tok-{{0..2}}.bin", SEQ_LEN, **opts)
    ds = PackedDocuments(
        f"s3://{BUCKET}/tok/tok-{{0..2}}.bin", SEQ_LEN, storage_options=_servers.s3_options(proxy),
        **opts,
    )  # fmt: skip
    assert ds.shard_sizes == local.shard_sizes and ds.stream_signature == local.stream_signature
    a, b = stream(loader(local)), stream(loader(ds, num_workers=2))
    assert len(a) == len(b) > 10
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert first_difference(x, y) is None, f"step {step}: {first_difference(x, y)}"
