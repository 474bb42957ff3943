"""Fixtures shared by several test files."""

from __future__ import annotations

import pathlib
from collections import Counter
from typing import Any

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


# -- real servers on 127.0.0.1, one of each per test session (seekdata._servers) -------------------


@pytest.fixture(scope="session")
def s3_server() -> Any:
    """moto's S3 server, its own process."""
    from seekdata import _servers

    with _servers.s3_server() as server:
        yield server


@pytest.fixture(scope="session")
def s3_proxy(s3_server: Any) -> Any:
    """The counting, fault-injecting proxy in front of the S3 server (no faults unless a test
    asks, and then only until it ends)."""
    from seekdata import _servers

    with _servers.fault_proxy(s3_server) as proxy:
        yield proxy


@pytest.fixture
def proxy(s3_proxy: Any) -> Any:
    """The proxy, its counters zeroed, its faults off again after the test."""
    s3_proxy.faults(0)
    s3_proxy.reset()
    yield s3_proxy
    s3_proxy.faults(0)


@pytest.fixture(scope="session")
def http_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The folder the HTTP server serves."""
    return tmp_path_factory.mktemp("http-root")


@pytest.fixture(scope="session")
def http_server(http_root: pathlib.Path) -> Any:
    """uvicorn serving ``http_root`` with starlette's StaticFiles (Range honoured)."""
    from seekdata import _servers

    with _servers.http_server(http_root) as server:
        yield server


# -- scheduling: the longest files start first -----------------------------------------------------

#: Files whose few long tests would keep one worker busy after the others are done, were they
#: handed out late, so they start first. The other files follow with the most tests first (as
#: pytest-xdist orders loadfile's files by default): many short in-process tests beside these
#: process-heavy ones. Started first were instead the 37 longest files, longest first, in one
#: run here (e24e6ef + this list's first commit): 950 s against 870 s for the default order,
#: its sum of test times 2645 s against 2365 s, as the heavy files (DDP ranks, torchrun, the
#: SIGKILL demo) ran at the same time and slowed each other on 2 cores. With the default order
#: instead the torchrun file (1 test, 84 s) and the benchmark smoke tests were the last to start.
#: ``--dist loadfile`` with ``--no-loadscope-reorder`` (pyproject.toml) keeps this order.
LONGEST_FIRST = (
    "tests/tools/test_elastic_torchrun.py",
    "tests/tools/test_bench_scripts.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = pathlib.Path(str(config.rootpath))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    names = {id(item): pathlib.Path(str(item.path)).relative_to(root).as_posix() for item in items}
    tests = Counter(names.values())

    def key(item: pytest.Item) -> tuple[int, int]:
        name = names[id(item)]
        return rank.get(name, len(rank)), -tests[name]

    items.sort(key=key)  # stable: each file's tests keep their order
