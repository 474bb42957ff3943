"""`seekdata index`: builds the shard indexes TarShards reads; exit 0, or 2 with a message."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import tarfile
import weakref
from collections.abc import Iterator

import pytest
import webdataset as wds

import seekdata.sources.wds.tarindex as tarindex
from seekdata.tools.cli import build_parser, main
from seekdata.wds import TarShards
from tests.helpers.paths import ROOT


def write_shards(directory: pathlib.Path, n_shards: int = 4, per_shard: int = 5) -> str:
    with wds.ShardWriter(str(directory / "shard-%03d.tar"), maxcount=per_shard, verbose=0) as w:
        for i in range(n_shards * per_shard):
            w.write({"__key__": f"k{i:04d}", "txt": f"sample {i}"})
    return str(directory / f"shard-{{000..{n_shards - 1:03d}}}.tar")


def write_tar(path: pathlib.Path, names: list[str]) -> str:
    with tarfile.open(path, "w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return str(path)


def test_index_builds_every_shard_once(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], scans: list[str]
) -> None:
    pattern = write_shards(tmp_path)
    assert main(["index", pattern]) == 0
    out, err = capsys.readouterr()
    assert out == (
        "built 4 indexes, found 0 current: 4 shards, 20 samples; indexes beside the shards\n"
        f"manifest {tmp_path / 'seekdata-manifest-tar.json'}: 4 files\n"
    )
    assert "4/4" in err  # the progress bar goes to stderr
    assert sorted(p.name for p in tmp_path.glob(f"*{tarindex.INDEX_SUFFIX}")) == [
        f"shard-{s:03d}.tar{tarindex.INDEX_SUFFIX}" for s in range(4)
    ]
    assert main(["index", pattern]) == 0
    assert len(scans) == 4  # current indexes are kept, and the command says so
    assert capsys.readouterr().out.startswith("built 0 indexes, found 4 current: 4 shards,")
    assert len(TarShards(pattern)) == 20
    assert len(scans) == 4  # and TarShards uses them
    assert main(["index", "--force", pattern]) == 0
    assert len(scans) == 8
    assert capsys.readouterr().out.startswith("built 4 indexes, found 0 current: 4 shards,")


def test_index_dir_jobs_and_several_patterns(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], scans: list[str]
) -> None:
    pattern = write_shards(tmp_path)
    first, rest = pattern.replace("{000..003}", "000"), pattern.replace("{000..003}", "{001..003}")
    index_dir = tmp_path / "idx"
    assert main(["index", first, rest, "--index-dir", str(index_dir), "-j", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(f"indexes {index_dir}") and out[1].endswith(": 4 files")
    assert out[1].startswith(f"manifest {index_dir / 'seekdata-manifest-tar.'}")  # its folder's
    assert len(list(index_dir.iterdir())) == 4 + 1
    assert not list(tmp_path.glob(f"*{tarindex.INDEX_SUFFIX}"))
    assert len(TarShards(pattern, index_dir=index_dir)) == 20
    assert scans == []  # built by the command's worker processes, reused here


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    return err[err.index("seekdata index: error: ") :]


def test_missing_shard(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    pattern = write_shards(tmp_path).replace("003", "004")
    assert "shard-004.tar does not exist" in error_of(["index", pattern], capsys)


def test_truncated_shard(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    pattern = write_shards(tmp_path)
    path = tmp_path / "shard-001.tar"
    os.truncate(path, path.stat().st_size // 2)
    assert "shard-001.tar is truncated" in error_of(["index", pattern], capsys)


def test_changed_shard_needs_force(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = write_shards(tmp_path)
    assert main(["index", pattern]) == 0
    path = tmp_path / "shard-002.tar"
    with wds.TarWriter(str(path)) as w:
        w.write({"__key__": "other", "txt": "a longer sample than before, so the size changes"})
    message = error_of(["index", pattern], capsys)
    assert "shard-002.tar changed since its index was built" in message
    assert "--force" in message
    assert main(["index", "--force", pattern]) == 0
    assert TarShards(pattern).shard_sizes == [5, 5, 1, 5]


def test_split_sample(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_tar(tmp_path / "a.tar", ["k0.txt", "k1.txt"])
    b = write_tar(tmp_path / "b.tar", ["k1.json", "k2.txt"])
    message = error_of(["index", a, b], capsys)
    assert "'k1' is split across shards" in message
    assert "a.tar" in message and "b.tar" in message


def test_pipe_needs_allow_pipe(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_shards(tmp_path).replace("{000..003}", "000")
    url = f"pipe:cat {path}"
    assert "allow_pipe=True (--allow-pipe)" in error_of(["index", url], capsys)
    assert main(["index", url, "--allow-pipe", "--index-dir", str(tmp_path / "idx")]) == 0


def test_empty_pattern_and_bad_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert "expected at least one shard" in error_of(["index", ""], capsys)
    assert "--jobs must be at least 1" in error_of(["index", "x.tar", "-j", "0"], capsys)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["index"])
    assert exit_.value.code == 2
    assert main([]) == 2
    assert "index" in capsys.readouterr().err
    assert "index" in build_parser().format_help()


def test_runs_as_a_module(tmp_path: pathlib.Path) -> None:
    pattern = write_shards(tmp_path, n_shards=2)
    done = subprocess.run(
        [sys.executable, "-m", "seekdata.tools.cli", "index", pattern],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "built 2 indexes, found 0 current: 2 shards, 10 samples; indexes beside the shards\n"
        f"manifest {tmp_path / 'seekdata-manifest-tar.json'}: 2 files\n"
    )


def test_the_progress_bar_keeps_no_item(capsys: pytest.CaptureFixture[str]) -> None:
    """The bar counts; it holds no shard (issue 35: the command's memory must not grow with
    the shards). Every item it passed on is freed once its consumer drops it (the one it is
    passing on is held by its own frame until the next)."""
    from seekdata.tools import cli

    class Item:
        pass

    refs: list[weakref.ref[Item]] = []

    def items() -> Iterator[Item]:
        for _ in range(50):
            item = Item()
            refs.append(weakref.ref(item))
            yield item
            del item

    for i, item in enumerate(cli._progress_bar(items(), 50)):
        del item
        assert all(ref() is None for ref in refs[:i]), f"an item before {i} is still held"
    assert len(refs) == 50 and "50/50" in capsys.readouterr().err


def test_the_console_script_names_the_tools_main() -> None:
    """pyproject's ``seekdata`` script must name an importable main (tools moved under tools/)."""
    import importlib

    import tomllib

    pyproject = ROOT / "pyproject.toml"
    target = tomllib.loads(pyproject.read_text())["project"]["scripts"]["seekdata"]
    module, _, attr = target.partition(":")
    assert target == "seekdata.tools.cli:main"
    assert getattr(importlib.import_module(module), attr) is main
