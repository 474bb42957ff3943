"""The floor of file-backed sources (sources/files): the families share its helpers, so a fourth
copy of the name grammar, the open-file LRU or the index writer is caught here; a source reads
a remote batch through the protocol's ``prefetch``, keeping per-sample keys; and the integer
rule holds at the remote-reading entry points."""

from __future__ import annotations

import ast
import os
import pathlib
import re
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from seekdata._core import source as _source
from seekdata._loader import fetch as _fetch
from seekdata.sources.files import handles, indexes, paths
from seekdata.sources.files.source import FileSource

SOURCES = pathlib.Path(seekdata.__file__).parent / "sources"
FAMILIES = ("tokens", "wds", "parquet")


def _calls(family: str) -> set[str]:
    """``module.function`` names each module of ``family`` refers to, and what it defines."""
    out = set()
    for path in (SOURCES / family).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                out.add(f"{node.value.id}.{node.attr}")
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                out.add(f"def {node.name}")
            elif isinstance(node, ast.Name):
                out.add(node.id)
    return out


def test_the_families_share_the_floors_helpers() -> None:
    from seekdata.sources.parquet import rows
    from seekdata.sources.tokens import corpora, files
    from seekdata.sources.wds import shards

    # one limit, one LRU class, one base class
    assert files.MAX_OPEN_FILES is shards.MAX_OPEN_FILES is rows.MAX_OPEN_FILES
    assert handles.MAX_OPEN_FILES == files.MAX_OPEN_FILES
    for cls in (corpora.TokenWindows, corpora.PackedDocuments, shards.TarShards, rows.ParquetRows):
        assert issubclass(cls, FileSource), cls
        assert "_check_index" not in vars(cls) and "__new__" not in vars(cls), cls
    for family in FAMILIES:
        used = _calls(family)
        # no family keeps its own grammar, LRU, index writer or scheme parser
        assert not used & {"def expand_files", "def expand_urls", "def _expand", "def url_scheme"}
        assert "OrderedDict" not in used or family == "parquet", family  # parquet's row groups
        assert "braceexpand" not in used, family
        assert "_paths.expand" in used, family
    assert "_handles.OpenFiles" in _calls("tokens") & _calls("wds") & _calls("parquet")
    assert "_indexes.write_atomic" in _calls("tokens") & _calls("wds")
    for index in ("tokens/index.py", "wds/tarindex.py", "parquet/footers.py"):
        assert "os.replace" not in (SOURCES / index).read_text(), index  # the floor's writer
    assert {"_handles.changed"} <= _calls("tokens") & _calls("wds") & _calls("parquet")


def test_the_remote_names_are_the_classes() -> None:
    """Remote* are aliases now: one class per family, local or remote."""
    from seekdata.tokens import (
        PackedDocuments,
        RemotePackedDocuments,
        RemoteTokenWindows,
        TokenWindows,
    )
    from seekdata.wds import RemoteTarShards, TarShards

    assert RemoteTarShards is TarShards
    assert RemoteTokenWindows is TokenWindows and RemotePackedDocuments is PackedDocuments


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("a.bin", ["a.bin"]),
        (pathlib.Path("a.bin"), ["a.bin"]),
        ("t-{0..2}.bin", ["t-0.bin", "t-1.bin", "t-2.bin"]),
        ("s-{000..002}.tar", ["s-000.tar", "s-001.tar", "s-002.tar"]),
        ("{a,b}-{1..2}", ["a-1", "a-2", "b-1", "b-2"]),
        ("s3://b/{x,y}.parquet", ["s3://b/x.parquet", "s3://b/y.parquet"]),
        (["b.bin", pathlib.Path("a.bin")], ["b.bin", "a.bin"]),
        (("a", "b"), ["a", "b"]),
        (iter(["a", "b"]), ["a", "b"]),
    ],
)
def test_one_grammar_names_the_files(given: Any, want: list[str]) -> None:
    assert paths.expand(given, "here") == want


@pytest.mark.parametrize(
    ("given", "error", "says"),
    [
        ("", ValueError, "expected at least one file"),
        ([], ValueError, "expected at least one file"),
        (["a", ""], ValueError, "expected at least one file"),
        (7, TypeError, "expected a brace pattern"),
        (b"a", TypeError, "expected a brace pattern"),
        ([b"a"], TypeError, "every file must be a str"),
        ([b"a"], ValueError, "every file must be a str"),  # tokens and Parquet said ValueError
        ("a-{0..2", ValueError, "unbalanced braces"),
    ],
)
def test_one_grammar_refuses_with_the_formula(given: Any, error: type, says: str) -> None:
    with pytest.raises(error, match=says) as caught:
        paths.expand(given, "here")
    assert str(caught.value).startswith("here: ") and "; pass " in str(caught.value)


def test_one_scheme_parser() -> None:
    from seekdata.sources.remote import urls

    assert paths.url_scheme is urls.url_scheme
    given = ("pipe:cat x", "FILE:///a", "s3://b/k", "a/b", "C:\\x")
    assert [urls.url_scheme(u) for u in given] == ["pipe", "file", "s3", None, None]
    assert [urls.scheme_of(u) for u in ("pipe:cat x", "file:///a", "S3://b/k", "a")] == [
        None, "file", "s3", None,
    ]  # fmt: skip


def test_the_lru_keeps_at_most_the_limit_and_closes_what_it_drops(monkeypatch: Any) -> None:
    monkeypatch.setattr(handles, "MAX_OPEN_FILES", 2)
    closed: list[int] = []
    lru: handles.OpenFiles[int] = handles.OpenFiles(close=closed.append)
    opened = [lru.get(k, lambda k=k: k * 10) for k in (1, 2, 1, 3)]
    assert opened == [10, 20, 10, 30] and closed == [20] and len(lru) == 2
    assert lru.get(1, lambda: -1) == 10  # kept: not opened again
    lru.close()
    assert sorted(closed) == [10, 20, 30] and len(lru) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_opens_its_own_files_and_closes_the_inherited_ones(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    lru: handles.OpenFiles[int] = handles.OpenFiles(close=os.close)
    fd = lru.get("a", lambda: os.open(tmp_path / "a", os.O_RDONLY))
    pid = os.fork()
    if pid == 0:  # the child: the inherited fd is closed before a new file opens in its own LRU
        status = 1
        try:
            closed = []

            def opener() -> int:
                try:
                    os.fstat(fd)
                except OSError:
                    closed.append(fd)
                return os.open(tmp_path / "b", os.O_RDONLY)

            mine = lru.get("b", opener)
            status = 0 if (closed, len(lru), os.pread(mine, 1, 0)) == ([fd], 1, b"b") else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.pread(fd, 1, 0) == b"a" and len(lru) == 1  # the parent's copy is its own
    lru.close()


def test_the_index_writer_is_atomic_and_places_local_indexes(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "deep" / "x.idx"
    indexes.write_atomic(str(target), b"one")
    indexes.write_atomic(str(target), b"two")
    assert target.read_bytes() == b"two" and sorted(p.name for p in target.parent.iterdir()) == [
        "x.idx"
    ]
    data = tmp_path / "a.bin"
    assert indexes.index_path(str(data), ".s", None) == f"{data}.s"
    under = indexes.index_path(str(data), ".s", str(tmp_path / "ix"))
    assert re.fullmatch(re.escape(str(tmp_path / "ix" / "a.bin.")) + "[0-9a-f]{16}[.]s", under)


class _Remote(torch.utils.data.Dataset):
    """A source that declares prefetch (as a remote file-backed one does), and a batched read."""

    reads_batches = False

    def __init__(self) -> None:
        self.prefetched: list[list[int]] = []

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> tuple[int, float]:
        return index, float(torch.rand(()))

    def __getitems__(self, indices: list[int]) -> list[tuple[int, float]]:
        raise AssertionError("the loader must not read this source a batch at a time")

    def prefetch(self, indices: list[int]) -> None:
        self.prefetched.append(list(indices))


class _Local(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> tuple[int, float]:
        return index, float(torch.rand(()))


def test_prefetch_is_called_per_batch_and_keys_stay_per_sample() -> None:
    """A source that prefetches gives the same samples, under the same per-sample keys, as one
    that does not; the loader hands it each batch's indices once, before reading them."""
    remote = _Remote()
    assert not _fetch.batched_read(remote) and _source.prefetch(remote) is not None

    def run(ds: Any) -> list[Any]:
        loader = seekdata.StatefulDataLoader(ds, batch_size=4, shuffle=True, seed=5)
        return [b for b in loader]

    got, want = run(remote), run(_Local())
    assert len(got) == len(want) == 3
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
    assert [i for batch in remote.prefetched for i in batch] == [int(i) for b in want for i in b[0]]
    assert all(len(batch) == 4 for batch in remote.prefetched)


def test_a_declared_batched_read_wins_over_torchs_rule() -> None:
    class Says(_Local):
        reads_batches = True

        def __getitems__(self, indices: list[int]) -> list[Any]:
            return [self[i] for i in indices]

    class Declines(Says):
        reads_batches = False

    assert _fetch.batched_read(Says()) and not _fetch.batched_read(Declines())
    assert not _fetch.batched_read(type("NoGetitems", (_Local,), {"reads_batches": True})())


def test_the_integer_rule_at_the_remote_entry_points(tmp_path: pathlib.Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from seekdata.parquet import ParquetRows
    from seekdata.remote import Cache

    cache = Cache(tmp_path / "c", max_bytes=np.int64(1 << 20), block_bytes=np.int32(4096))
    assert (cache.max_bytes, cache.block_bytes) == (1 << 20, 4096)
    assert type(cache.max_bytes) is int and type(cache.block_bytes) is int
    for name in ("max_bytes", "block_bytes"):
        for bad in (True, 1.0, "8"):
            with pytest.raises(TypeError, match=rf"Cache: {name} must be a positive int") as e:
                Cache(tmp_path / "c", **{"max_bytes": 1 << 20, name: bad})
            assert "; pass a number of bytes" in str(e.value)
        with pytest.raises(ValueError, match=rf"Cache: {name} must be a positive int"):
            Cache(tmp_path / "c", **{"max_bytes": 1 << 20, name: 0})
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=4)
    rows = ParquetRows(str(path), keep_row_groups=np.int64(2))
    assert rows.keep_row_groups == 2 and type(rows.keep_row_groups) is int
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match="ParquetRows: keep_row_groups must be a positive int"):
            ParquetRows(str(path), keep_row_groups=bad)
    with pytest.raises(ValueError, match="keep_row_groups must be a positive int; got 0"):
        ParquetRows(str(path), keep_row_groups=0)
