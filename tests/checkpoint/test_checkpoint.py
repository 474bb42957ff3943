"""checkpoint: atomic verified files, corruption and truncation errors, rotation, DDP paths."""

from __future__ import annotations

import errno
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seekdata._core import dist as _dist
from seekdata.checkpoint import CheckpointCorruptError, CheckpointManager, load, save, verify
from seekdata.checkpoint import files as _files
from seekdata.checkpoint import manager as _manager
from tests.helpers.paths import SCRIPTS
from tests.scripts._ckpt_launch import gloo_job

OBJ = {"w": torch.arange(12.0).reshape(3, 4), "step": 7, "name": "run", "cfg": {"lr": 0.1}}


def assert_obj(loaded: dict) -> None:
    assert torch.equal(loaded["w"], OBJ["w"])
    assert {k: v for k, v in loaded.items() if k != "w"} == {
        k: v for k, v in OBJ.items() if k != "w"
    }


def test_round_trip_and_plain_torch_load(tmp_path: Path) -> None:
    path = save(OBJ, tmp_path / "a" / "b" / "ckpt.pt")  # creates missing folders
    assert path == tmp_path / "a" / "b" / "ckpt.pt"
    assert_obj(load(path))
    assert_obj(load(str(path), map_location="cpu"))
    assert_obj(torch.load(path, weights_only=True))  # still a plain torch checkpoint
    assert os.listdir(path.parent) == ["ckpt.pt"]  # no temporary file left


def test_file_mode_follows_umask(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    reference.write_bytes(b"")
    path = save(OBJ, tmp_path / "ckpt.pt")
    assert path.stat().st_mode & 0o777 == reference.stat().st_mode & 0o777


def test_overwrite_replaces_the_file(tmp_path: Path) -> None:
    path = save({"v": 1}, tmp_path / "ckpt.pt")
    save({"v": 2}, path)
    assert load(path) == {"v": 2}


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = save({"v": 1}, tmp_path / "ckpt.pt")
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        save({"f": lambda: 0}, path)
    assert load(path) == {"v": 1}
    assert os.listdir(tmp_path) == ["ckpt.pt"]


@pytest.mark.parametrize(
    "where", ["first", "middle", "last-of-archive", "footer-hash", "footer-end"]
)
def test_any_flipped_byte_is_detected(tmp_path: Path, where: str) -> None:
    path = save(OBJ, tmp_path / "ckpt.pt")
    data = bytearray(path.read_bytes())
    footer = len(b"\nseekdata-checkpoint/1 sha256=") + 64 + len(b" size=") + 20 + 1
    offset = {
        "first": 0,
        "middle": len(data) // 2,
        "last-of-archive": len(data) - footer - 1,
        "footer-hash": len(data) - footer + 40,
        "footer-end": len(data) - 2,
    }[where]
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match=str(path)) as info:
        load(path)
    assert isinstance(info.value, ValueError) and info.value.path == path


@pytest.mark.parametrize("keep", [0, 10, 0.5, -1, -10])
def test_truncation_is_detected(tmp_path: Path, keep: float) -> None:
    path = save(OBJ, tmp_path / "ckpt.pt")
    data = path.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointCorruptError, match=f"load: {path} .*(truncated|corrupt)"):
        load(path)


def test_appended_bytes_are_detected(tmp_path: Path) -> None:
    path = save(OBJ, tmp_path / "ckpt.pt")
    with open(path, "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(CheckpointCorruptError, match="truncated or corrupt"):
        verify(path)


def test_hash_mismatch_message(tmp_path: Path) -> None:
    path = save(OBJ, tmp_path / "ckpt.pt")
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="must match the sha256 in its footer"):
        verify(path)


def test_plain_torch_save_file_gets_a_pointed_error(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save(OBJ, path)
    with pytest.raises(CheckpointCorruptError, match=r"plain torch.save file.*torch.load"):
        load(path)


class _Runs:
    """Unpickling it would create a file: proof that a refused file was not unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_a_legacy_torch_save_file_is_named_with_how_to_load_it(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save(OBJ, path, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointCorruptError) as info:
        load(path)
    message = str(info.value)
    assert "torch.save file in the legacy, non-zip format" in message
    assert "torch.load(path, weights_only=True)" in message and "corrupt" not in message
    assert torch.equal(torch.load(path, weights_only=True)["w"], OBJ["w"])  # the advice works


@pytest.mark.parametrize("content", ["plain data", "object"])
def test_a_plain_pickle_is_named_and_refused_unread(tmp_path: Path, content: str) -> None:
    path, marker = tmp_path / "state.pkl", tmp_path / "ran"
    obj = {"step": 3, **({"obj": _Runs(marker)} if content == "object" else {})}
    path.write_bytes(pickle.dumps(obj, protocol=4))
    with pytest.raises(CheckpointCorruptError, match=r"it is a plain pickle, pickle\.dump") as info:
        load(path)
    message = str(info.value)
    assert "refused unread" in message and "pickle.load" in message
    assert "corrupt" not in message and not marker.exists()
    assert ("pathlib.Path.touch" in message) == (content == "object")  # what it would import


def test_missing_file_and_bad_path_type(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.pt")
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike; got int"):
        save(OBJ, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike; got NoneType"):
        load(None)  # type: ignore[arg-type]


def test_weights_only_is_the_default(tmp_path: Path) -> None:
    path = save({"p": Path("x")}, tmp_path / "ckpt.pt")
    with pytest.raises(pickle.UnpicklingError):
        load(path)
    assert load(path, weights_only=False) == {"p": Path("x")}


# --- CheckpointManager ---------------------------------------------------------------------


def test_keep_last_rotation_and_latest(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "ckpt", keep_last=2)
    assert manager.steps() == [] and manager.latest() is None and manager.load_latest() is None
    for step in (10, 20, 30, 40):
        path = manager.save(step, {"step": step})
        assert path == tmp_path / "ckpt" / f"step_{step:010d}.pt"
    assert manager.steps() == [30, 40]
    assert manager.latest() == manager.path(40)
    assert manager.load_latest() == {"step": 40}
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["step_0000000030.pt", "step_0000000040.pt"]


def test_keep_all_by_default(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    for step in range(5):
        manager.save(step, {"step": step})
    assert manager.steps() == [0, 1, 2, 3, 4]


def test_same_step_overwrites_and_lower_step_is_refused(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=3)
    manager.save(5, {"v": 1})
    manager.save(5, {"v": 2})
    assert manager.load_latest() == {"v": 2}
    with pytest.raises(ValueError, match=r"step must be >= the latest step .* \(5\).*; got step 4"):
        manager.save(4, {"v": 3})
    assert manager.steps() == [5]


def test_other_files_are_ignored_and_never_deleted(tmp_path: Path) -> None:
    for name in ("notes.txt", "step_12.pt.bak", ".step_0000000099.pt.123.ab.tmp", "step_x.pt"):
        (tmp_path / name).write_text("keep me")
    other = CheckpointManager(tmp_path, prefix="ema_", keep_last=1)
    other.save(1, {"ema": 1})
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save(1, {"v": 1})
    manager.save(2, {"v": 2})
    assert manager.steps() == [2] and other.steps() == [1]
    assert (tmp_path / "notes.txt").exists() and (
        tmp_path / ".step_0000000099.pt.123.ab.tmp"
    ).exists()


def test_corrupt_latest_raises(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"v": 1})
    path = manager.latest()
    assert path is not None
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(CheckpointCorruptError, match=str(path)):
        manager.load_latest()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"keep_last": 0}, ValueError, "keep_last must be None \\(keep all\\) or >= 1; got 0"),
        ({"keep_last": -1}, ValueError, "keep_last must be a non-negative int; got -1"),
        ({"keep_last": "3"}, TypeError, "keep_last must be a non-negative int; got str"),
        ({"keep_last": True}, TypeError, "keep_last must be a non-negative int; got bool"),
        ({"prefix": "a/b"}, ValueError, "prefix must be a str without path separators"),
        ({"suffix": 3}, ValueError, "suffix must be a str"),
    ],
)
def test_manager_rejects_bad_arguments(
    tmp_path: Path, kwargs: dict, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        CheckpointManager(tmp_path, **kwargs)


def test_manager_rejects_bad_steps(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    with pytest.raises(ValueError, match="step must be a non-negative int; got -1"):
        manager.save(-1, {})
    with pytest.raises(TypeError, match="step must be a non-negative int; got float"):
        manager.path(1.0)  # type: ignore[arg-type]


# --- DDP helpers -----------------------------------------------------------------------------


def test_ddp_helpers_without_a_process_group(tmp_path: Path) -> None:
    path = _manager.save_on_rank0(OBJ, tmp_path / "ckpt.pt")
    loaded = _manager.load_on_every_rank(path)
    assert_obj(loaded)
    assert loaded["w"].device == torch.device("cpu")


def test_collective_device_follows_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    for backend, device in [("nccl", "cuda:3"), ("gloo", "cpu"), ("cpu:gloo,cuda:nccl", "cpu")]:
        monkeypatch.setattr(_dist.dist, "get_backend", lambda backend=backend: backend)
        assert _dist.collective_device(None) == torch.device(device)
    assert _dist.collective_device("cuda:1") == torch.device("cuda:1")


def test_local_device_prefers_set_device_then_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert _manager._local_device() == torch.device("cuda:2")
    monkeypatch.setenv("LOCAL_RANK", "5")  # one visible device per process: not an index here
    assert _manager._local_device() == torch.device("cuda:0")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert _manager._local_device() == torch.device("cuda:1")


def test_rank0_saves_every_rank_waits_then_loads(tmp_path: Path) -> None:
    with gloo_job("_ckpt_worker.py", tmp_path, "save_then_load") as job:
        results = job.results()
    for r in results:
        assert r["by"] == 0 and r["w_sum"] == 0.0 and r["device"] == "cpu"  # rank 0's file
        assert r["steps"] == [3, 4] and r["latest_step"] == 4 and r["latest_by"] == 0


def test_a_failed_rank0_write_raises_on_every_rank(tmp_path: Path) -> None:
    with gloo_job("_ckpt_worker.py", tmp_path, "rank0_fails") as job:
        rank0, rank1 = job.results()
    assert rank0["error"] in ("FileExistsError", "NotADirectoryError")
    assert rank1["error"] == "RuntimeError" and "rank 0" in rank1["message"]


# --- faults: temporary files of killed writers, corrupt newest files, foreign names, full disk


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _backdate(path: Path) -> None:
    old = time.time() - 2 * _files._STALE_AFTER
    os.utime(path, (old, old), follow_symlinks=False)


def test_a_killed_writers_temp_is_removed_by_the_next_save(tmp_path: Path) -> None:
    path, mark = tmp_path / "ckpt.pt", tmp_path / "mark"
    save({"v": 1}, path)
    writer = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPTS / "_ckpt_killed_writer.py"),
            str(path),
            str(mark),
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not mark.exists() and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mark.exists(), "the writer never started writing"
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1 and f".{writer.pid}." in temps[0].name
        _manager.save({"v": 2}, path)  # the writer still runs: its temp is left alone
        assert temps[0].exists()
    finally:
        writer.kill()
        writer.wait()
    _backdate(temps[0])
    _manager.save({"v": 3}, path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt", "mark"] and load(path) == {"v": 3}


def test_only_provably_orphaned_temps_of_ours_are_removed(tmp_path: Path) -> None:
    host, dead = _files._host(), _dead_pid()
    keep = [
        f".ckpt.pt.{host}.{os.getpid()}.0123abcd.tmp",  # a live writer (this process)
        f".ckpt.pt.{host}.{os.getppid()}.0123abcd.tmp",  # a live writer (another process)
        f".ckpt.pt.other-host.{dead}.0123abcd.tmp",  # another host's: its pid means nothing here
        f".other.pt.{host}.{dead}.0123abcd.tmp",  # a temp of another file
        f"ckpt.pt.{host}.{dead}.0123abcd.tmp",  # not our name: no leading dot
        f".ckpt.pt.{host}.{dead}.0123abcd.tmp.bak",
        ".ckpt.pt.tmp",
        "notes.txt",
    ]
    for name in keep:
        (tmp_path / name).write_text("keep me")
        _backdate(tmp_path / name)
    recent = tmp_path / f".ckpt.pt.{host}.{dead}.00000001.tmp"  # dead, but written just now
    recent.write_text("keep me")
    link = tmp_path / f".ckpt.pt.{host}.{dead}.00000002.tmp"  # a link, never ours
    link.symlink_to(tmp_path / "notes.txt")
    _backdate(link)
    stale = tmp_path / f".ckpt.pt.{host}.{dead}.00000003.tmp"
    stale.write_text("orphan")
    _backdate(stale)
    save({"v": 1}, tmp_path / "ckpt.pt")
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, recent.name, link.name, "ckpt.pt"])


def test_manager_removes_orphaned_temps_of_any_of_its_steps(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    host, dead = _files._host(), _dead_pid()
    orphan = tmp_path / f".{manager.path(3).name}.{host}.{dead}.0123abcd.tmp"
    foreign = tmp_path / f".step_3.pt.{host}.{dead}.0123abcd.tmp"  # not a name it writes
    for p in (orphan, foreign):
        p.write_text("x")
        _backdate(p)
    manager.save(5, {"v": 5})
    assert not orphan.exists() and foreign.exists()


def test_load_latest_falls_back_to_the_newest_valid_and_save_sets_the_bad_one_aside(
    tmp_path: Path,
) -> None:
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save(2, {"step": 2})
    manager = CheckpointManager(tmp_path, keep_last=2)
    manager.save(4, {"step": 4})
    bad = manager.path(4)
    bad.write_bytes(bad.read_bytes()[:-7])  # a truncated newest checkpoint
    with pytest.warns(UserWarning, match=f"{bad}.*loaded {manager.path(2)}"):
        assert manager.load_latest() == {"step": 2}
    assert bad.exists()  # loading never changes the folder
    with pytest.warns(UserWarning, match="is corrupt and newer than step 3; renamed it"):
        manager.save(3, {"step": 3})  # the resumed run goes on from step 2
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save(3, {"step": 3})  # rotation keeps the file it wrote, the newest valid one
    assert manager.steps() == [3] and manager.load_latest() == {"step": 3}
    assert (tmp_path / f"{bad.name}.corrupt").exists()


def test_foreign_names_are_never_listed_loaded_or_deleted(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save(10, {"step": 10})
    for name in ("step_7.pt", "step_10.pt", "step_00000000012.pt"):
        (tmp_path / name).write_text("someone else's")
    (tmp_path / "step_0000000013.pt").mkdir()  # a folder, not a checkpoint
    assert manager.steps() == [10] and manager.latest() == manager.path(10)
    assert manager.load_latest() == {"step": 10}
    manager.save(11, {"step": 11})
    assert manager.steps() == [11] and manager.load_latest() == {"step": 11}
    for name in ("step_7.pt", "step_10.pt", "step_00000000012.pt", "step_0000000013.pt"):
        assert (tmp_path / name).exists()


def test_a_full_disk_raises_the_oserror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save({"v": 1}, tmp_path / "ckpt.pt")
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f: object) -> None:
            self.f, self.written = f, 0

        def write(self, data: bytes) -> int:
            self.written += len(data)
            if self.written > 1000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self.f, name)

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

    monkeypatch.setattr(_files.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    for write in (
        lambda: save({"w": torch.zeros(10_000)}, path),
        lambda: CheckpointManager(tmp_path).save(1, {"w": torch.zeros(10_000)}),
    ):
        with pytest.raises(OSError, match="must have room on its file system") as info:
            write()
        assert info.value.errno == errno.ENOSPC and not isinstance(info.value, RuntimeError)
    monkeypatch.undo()
    assert load(path) == {"v": 1} and sorted(os.listdir(tmp_path)) == ["ckpt.pt"]


def test_a_file_size_limit_raises_efbig(tmp_path: Path) -> None:
    """A real limit (RLIMIT_FSIZE), in a child process: the write fails with EFBIG."""
    script = (
        "import resource, signal, sys, torch\n"
        "from seekdata.checkpoint import save\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))\n"
        "try:\n"
        "    save({'w': torch.zeros(1 << 16)}, sys.argv[1])\n"
        "except OSError as e:\n"
        "    print(type(e).__name__, e.errno)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ckpt.pt")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["OSError", str(errno.EFBIG)], out.stderr
    assert os.listdir(tmp_path) == []


def test_a_foreign_name_for_a_real_step_never_rotates_that_step_away(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    manager.save(5, {"step": 5})
    manager.save(10, {"step": 10})
    (tmp_path / "step_10.pt").write_text("someone else's")  # counted twice, step 10 was deleted
    manager.save(11, {"step": 11})
    assert manager.steps() == [10, 11] and load(manager.path(10)) == {"step": 10}
    assert (tmp_path / "step_10.pt").read_text() == "someone else's"
