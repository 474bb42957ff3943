"""``seekdata index`` across processes and after a kill: four processes with ``--part I/4``
write the manifest one process writes (byte for byte, but its time); a build killed with
SIGKILL half-way indexes only the rest when run again (counted); the manifest of a folder
gains the shards indexed later; ``--merge`` and the part refusals."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import webdataset as wds

from seekdata.sources.files import manifest
from seekdata.sources.wds import tarindex
from seekdata.tools.cli import main
from seekdata.wds import TarShards
from tests.helpers.paths import ROOT, SCRIPTS

N = 23  # shards: not a multiple of the parts


def write(folder: pathlib.Path, n: int = N) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(n):
        with wds.TarWriter(str(folder / f"shard-{s:03d}.tar")) as sink:
            for j in range(1 + s % 4):
                sink.write({"__key__": f"s{s:03d}-{j}", "bin": bytes([s, j]) * 50})
    return str(folder / f"shard-{{000..{n - 1:03d}}}.tar")


def run(*argv: str, script: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    command = script or [sys.executable, "-m", "seekdata"]
    return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=300, env=env)


def test_four_parts_write_the_manifest_one_process_writes(tmp_path: pathlib.Path) -> None:
    pattern = write(tmp_path)
    name = manifest.manifest_name("tar")
    assert run("index", pattern).returncode == 0
    one = (tmp_path / name).read_bytes()
    for path in [tmp_path / name, *tmp_path.glob("*" + tarindex.INDEX_SUFFIX)]:
        path.unlink()  # the same shards indexed again, now by four processes at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "seekdata", "index", pattern, "--part", f"{i}/4"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        for i in range(4)
    ]  # whichever finishes last writes the manifest
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert sum("manifest " in out for out, _ in outs) >= 1
    four = (tmp_path / name).read_bytes()

    def timeless(data: bytes) -> bytes:
        return re.sub(rb'"created":"[^"]*"', b'"created":""', data)

    assert timeless(four) == timeless(one) and b'"created":"' in one  # byte for byte, but the time
    assert not list(tmp_path.glob("*.part-*"))  # the records are gone
    assert len(list(tmp_path.glob("*" + tarindex.INDEX_SUFFIX))) == N
    assert (
        TarShards(pattern).stream_signature == TarShards(pattern, manifest=False).stream_signature
    )


def test_parts_meet_with_merge_when_run_one_after_another(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = write(tmp_path, 6)
    assert main(["index", pattern, "--part", "0/3"]) == 0
    assert "2 part records to come" in capsys.readouterr().out
    assert not (tmp_path / manifest.manifest_name("tar")).exists()
    assert main(["index", pattern, "--merge", "3"]) == 2  # parts 1 and 2 of 3 not there yet
    assert "--merge: 2 part records are not there yet" in capsys.readouterr().err
    assert main(["index", pattern, "--part", "1/3"]) == 0
    assert main(["index", pattern, "--part", "2/3"]) == 0
    out = capsys.readouterr().out
    assert f"manifest {tmp_path / manifest.manifest_name('tar')}: 6 files" in out
    assert len(TarShards(pattern)) == sum(1 + s % 4 for s in range(6))
    for bad in ("4/4", "1", "a/b", "2/0"):
        assert main(["index", pattern, "--part", bad]) == 2
        assert "--part must be I/N with 0 <= I < N" in capsys.readouterr().err


def test_a_killed_build_resumes_and_indexes_only_the_rest(tmp_path: pathlib.Path) -> None:
    pattern = write(tmp_path)
    killed = run("9", "index", pattern, script=[sys.executable, str(SCRIPTS / "_index_killed.py")])
    assert killed.returncode == -9, killed.stderr  # SIGKILL, after its 9th index
    found = sorted(tmp_path.glob("*" + tarindex.INDEX_SUFFIX))
    assert len(found) == 9 and not (tmp_path / manifest.manifest_name("tar")).exists()
    again = run("index", pattern)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"built {N - 9} indexes, found 9 current: {N} shards")
    assert f"{manifest.manifest_name('tar')}: {N} files" in again.stdout
    assert len(TarShards(pattern)) == sum(1 + s % 4 for s in range(N))


def test_shards_added_later_join_the_folders_manifest(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, 5)
    first = str(tmp_path / "shard-{000..002}.tar")
    assert main(["index", first]) == 0
    later = str(tmp_path / "shard-{003..004}.tar")
    with pytest.raises(ValueError, match=r"shard-003.tar is not in the manifest"):
        TarShards(str(tmp_path / "shard-{000..004}.tar"))
    assert main(["index", later]) == 0  # only the new ones
    assert capsys.readouterr().out.splitlines()[-1].endswith(": 5 files")
    ds = TarShards(str(tmp_path / "shard-{000..004}.tar"))
    assert not ds._eager and ds.shard_sizes == [1, 2, 3, 4, 1]


def test_indexing_tar_shards_imports_neither_torch_nor_webdataset(tmp_path: pathlib.Path) -> None:
    """The command's serial part is its start: torch's import (seconds) would be most of it."""
    pattern = write(tmp_path, 3)
    code = (
        "import sys\nfrom seekdata.tools.cli import main\n"
        f"assert main(['index', '-j', '2', {pattern!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'webdataset')))"
    )
    done = run("-c", code, script=[sys.executable])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / manifest.manifest_name("tar")).exists()
