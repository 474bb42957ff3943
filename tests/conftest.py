"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest

from seekdata.sources.wds import tarindex


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs of every shard index scanned from now on (to prove an index is reused)."""
    seen: list[str] = []
    scan = tarindex.scan_shard

    def counting(path: str, url: str) -> tarindex.ShardIndex:
        seen.append(url)
        return scan(path, url)

    monkeypatch.setattr(tarindex, "scan_shard", counting)
    return seen
