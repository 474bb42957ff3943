"""Fixtures shared by several test files."""

from __future__ import annotations

import pathlib
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

#: The files that take longest (summed test time in a fresh-venv run with three workers, at
#: 41ed17d less what later commits cut), longest first: ``--dist loadfile`` with
#: ``--no-loadscope-reorder`` (pyproject.toml) hands files to the workers in collection order,
#: so a long file collected last (tests/tools/ sorts late) kept one worker busy after the others
#: were done; the short files not listed here come after them and even out the end. Only the
#: order changes; a file missing from this list runs after them, as collected.
#: test_lint.py is short with mypy's cache, about a minute without it (a fresh checkout).
LONGEST_FIRST = (
    "tests/tools/test_bench_scripts.py",
    "tests/test_docs.py",
    "tests/test_preemption.py",
    "tests/loader/test_exit.py",
    "tests/test_loader.py",
    "tests/sources/remote/test_sources.py",
    "tests/sources/tokens/test_tokens.py",
    "tests/tools/test_demo.py",
    "tests/tools/test_elastic_torchrun.py",
    "tests/tools/test_cli_verify.py",
    "tests/test_lint.py",
    "tests/loader/test_threads_iterable.py",
    "tests/loader/test_device_prefetch.py",
    "tests/sources/tokens/test_token_shards.py",
    "tests/integrations/test_lightning.py",
    "tests/sources/mixtures/test_mixture_schedule.py",
    "tests/sources/mixtures/test_mixture.py",
    "tests/tools/test_bench.py",
    "tests/loader/test_threads.py",
    "tests/test_packaging.py",
    "tests/loader/test_distributed.py",
    "tests/tools/test_cli_index_remote.py",
    "tests/sources/mixtures/test_mixture_changes.py",
    "tests/sources/parquet/test_parquet.py",
    "tests/integrations/test_accelerate.py",
    "tests/loader/test_torch_fidelity.py",
    "tests/sources/tokens/test_scale_tokens.py",
    "tests/tools/test_cli_index_parts.py",
    "tests/loader/test_elastic.py",
    "tests/sources/remote/test_seaweedfs.py",
    "tests/sources/test_scale_counts.py",
    "tests/sources/wds/test_wds.py",
    "tests/test_exports.py",
    "tests/checkpoint/test_checkpoint.py",
    "tests/sources/remote/test_threads.py",
    "tests/integrations/test_transformers.py",
    "tests/sources/parquet/test_scale_parquet.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = pathlib.Path(str(config.rootpath))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        name = pathlib.Path(str(item.path)).relative_to(root).as_posix()
        return rank.get(name, len(rank))

    items.sort(key=key)  # stable: each file's tests keep their order
