"""The disk ``Cache`` never serves a damaged block and never reaches out of its folder.

- A block whose file was changed (a flipped bit) or cut short is dropped and fetched again, with
  one warning per process, never served (its header holds its length and CRC-32).
- Names in the manifest that are not of the cache's own form (absolute, ``../``, any other) are
  never deleted; links planted in the folder (a block, a ``.tmp-<pid>`` file, the manifest, the
  root itself) are never followed; a root another user can write is refused.
- A disk that cannot take a block (no space, a file size limit) costs the cache, not the read:
  the fetched bytes are served, one warning, nothing left behind. A folder it cannot write is
  one clear error when the ``Cache`` is made. Two bounds on one folder: the smaller holds.

Every planted file and link lies in the test's ``tmp_path``; the full and read-only
filesystems are real (a file size limit; a tmpfs and a read-only bind mount in a private mount
namespace; a folder without write permission for a process without CAP_DAC_OVERRIDE), each in
a process of its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

from seekdata import _servers
from seekdata.remote import Cache
from seekdata.sources.remote import RemoteFile, Stores
from tests.helpers import remote_corpus as corpus

DATA = bytes(range(256)) * 4096  # 1 MiB, each byte's value its offset mod 256
BLOCK = 4096
FILE = BLOCK + 16  # a block's file: its header, then the block
BUCKET = "cache-safety-tests"


@pytest.fixture(scope="module")
def bucket(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    client = _servers.s3_client(s3_server)
    client.create_bucket(Bucket=BUCKET)
    client.put_object(Bucket=BUCKET, Key="data.bin", Body=DATA)
    folder = tmp_path_factory.mktemp("cache-safety-tar")
    corpus.write("tar", folder / "tar")
    _servers.upload(s3_server, BUCKET, folder)  # s3://cache-safety-tests/tar/...
    return f"s3://{BUCKET}"


def remote(proxy: Any, bucket: str) -> RemoteFile:
    return RemoteFile(Stores(_servers.s3_options(proxy)), f"{bucket}/data.bin")


def gets(proxy: Any) -> list[dict[str, Any]]:
    return [e for e in proxy.stats()["log"] if e["method"] == "GET"]


def block_file(cache: Cache, f: RemoteFile, block: int) -> pathlib.Path:
    return pathlib.Path(cache.root, cache._name(f, block))


def made_root(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """``tmp_path/cache`` and its ``seekdata-cache`` folder, made (to plant files in)."""
    folder = tmp_path / "cache"
    (folder / "seekdata-cache").mkdir(parents=True)
    return folder, folder / "seekdata-cache"


def outside(tmp_path: pathlib.Path, text: str = "not the cache's\n") -> pathlib.Path:
    """A file beside the cache's folder (still in ``tmp_path``) that it must never touch."""
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text(text)
    return victim


# -- 1. damaged blocks are dropped and fetched again, never served ------------------------


def test_a_flipped_bit_is_dropped_and_fetched_again_never_served(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    cache = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    span = slice(2 * BLOCK, 3 * BLOCK)
    assert cache.read(f, span.start, span.stop) == DATA[span]
    path = block_file(cache, f, 2)
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0x04  # one bit of the block's bytes
    path.write_bytes(raw)
    proxy.reset()
    with pytest.warns(UserWarning, match=r"is damaged .*CRC-32.*fetched again"):
        assert cache.read(f, span.start, span.stop) == DATA[span]
    assert len(gets(proxy)) == 1  # fetched again...
    proxy.reset()
    assert cache.read(f, span.start, span.stop) == DATA[span]
    assert gets(proxy) == []  # ... and kept whole
    assert cache.nbytes() == FILE  # the dropped one is no longer counted


def test_a_block_cut_short_never_lets_the_next_block_slide_in(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    cache = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    span = slice(2 * BLOCK + 10, 4 * BLOCK - 10)  # blocks 2 and 3
    assert cache.read(f, span.start, span.stop) == DATA[span]
    path = block_file(cache, f, 2)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    proxy.reset()
    with pytest.warns(UserWarning, match=r"is damaged .*bytes where this block's file has"):
        assert cache.read(f, span.start, span.stop) == DATA[span]
    assert len(gets(proxy)) == 1


def test_damaged_blocks_warn_once_per_process(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    cache = Cache(tmp_path, max_bytes=1 << 20, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    assert cache.read(f, 0, 6 * BLOCK) == DATA[: 6 * BLOCK]
    for block, damage in ((0, b"\0" * 20), (2, b""), (4, None)):
        path = block_file(cache, f, block)
        raw = path.read_bytes()
        path.write_bytes(raw[:7] + damage + raw[27:] if damage is not None else raw[:-1] + b"!")
    with pytest.warns(UserWarning, match="is damaged") as caught:
        assert cache.read(f, 0, 6 * BLOCK) == DATA[: 6 * BLOCK]
    assert len(caught) == 1


# -- 2. the cache stays in its folder -------------------------------------------------------


def test_eviction_deletes_nothing_but_its_own_names_inside_its_folder(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    folder, root = made_root(tmp_path)
    victim = outside(tmp_path)
    theirs = [victim, folder / "mine.blk", root / "notes.blk", root / ("a" * 40 + ".blk.bak")]
    for path in theirs[1:]:
        path.write_text("not the cache's\n")
    lines = [str(victim), "../mine.blk", "notes.blk", "../../outside/victim.txt",
             "a" * 40 + ".blk.bak", f"{root}/../mine.blk"]  # fmt: skip
    (root / "manifest").write_text("".join(f"{name} 100000\n" for name in lines))
    cache = Cache(folder, max_bytes=3 * FILE, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    for block in (0, 5, 9, 12, 5, 30):
        a = block * BLOCK + 100
        assert cache.read(f, a, a + 50) == DATA[a : a + 50]
        assert cache.nbytes() <= 3 * FILE
    assert all(path.read_text() == "not the cache's\n" for path in theirs)


def test_a_planted_tmp_link_is_never_written_through(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    folder, root = made_root(tmp_path)
    victim = outside(tmp_path)
    pid = os.getpid()
    (root / f"bound.tmp-{pid}").symlink_to(victim)
    cache = Cache(folder, max_bytes=2 * FILE, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    for name in ("total", "manifest", cache._name(f, 0), cache._name(f, 1), cache._name(f, 2)):
        (root / f"{name}.tmp-{pid}").symlink_to(victim)
    for block in (0, 1, 2):  # the third evicts: the manifest is written anew
        a = block * BLOCK
        assert cache.read(f, a, a + 10) == DATA[a : a + 10]
    assert victim.read_text() == "not the cache's\n"
    assert not list(root.glob("*.tmp-*"))
    assert cache.nbytes() <= 2 * FILE


@pytest.mark.parametrize("name", ["manifest", "lock", "total", "bound"])
def test_a_link_in_place_of_the_caches_own_file_is_refused(
    bucket: str, proxy: Any, tmp_path: pathlib.Path, name: str
) -> None:
    folder, root = made_root(tmp_path)
    victim = outside(tmp_path)
    (root / name).symlink_to(victim)
    f = remote(proxy, bucket)
    with pytest.raises(ValueError, match=rf"{name} is a symbolic link.*remove it"):
        cache = Cache(folder, max_bytes=1 << 20, block_bytes=BLOCK)
        cache.read(f, 0, 10)
    assert victim.read_text() == "not the cache's\n"


def test_a_manifest_link_planted_while_it_runs_gets_no_line(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    folder, root = made_root(tmp_path)
    victim = outside(tmp_path)
    cache = Cache(folder, max_bytes=1 << 20, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    assert cache.read(f, 0, 10) == DATA[:10]
    (root / "manifest").unlink()
    (root / "manifest").symlink_to(victim)
    with pytest.raises(ValueError, match="manifest is a symbolic link"):
        cache.read(f, BLOCK, BLOCK + 10)
    assert victim.read_text() == "not the cache's\n"


def test_a_block_planted_as_a_link_is_not_followed(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    folder, _ = made_root(tmp_path)
    cache = Cache(folder, max_bytes=1 << 20, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    victim = outside(tmp_path, "x" * FILE)
    block_file(cache, f, 1).symlink_to(victim)
    with pytest.warns(UserWarning, match=r"is damaged .*symbolic link"):
        assert cache.read(f, BLOCK, 2 * BLOCK) == DATA[BLOCK : 2 * BLOCK]
    assert victim.read_text() == "x" * FILE
    assert block_file(cache, f, 1).is_symlink()  # not the cache's: left alone


def test_a_root_that_is_a_link_is_refused(tmp_path: pathlib.Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "seekdata-cache").symlink_to(elsewhere)
    with pytest.raises(ValueError, match=r"seekdata-cache must be a directory.*symbolic link"):
        Cache(folder, max_bytes=1 << 20).nbytes()
    assert list(elsewhere.iterdir()) == []


def test_a_root_every_user_may_write_is_refused(tmp_path: pathlib.Path) -> None:
    folder, root = made_root(tmp_path)
    root.chmod(0o777)
    with pytest.raises(ValueError, match=r"every user may write in it \(mode drwxrwxrwx\)"):
        Cache(folder, max_bytes=1 << 20).nbytes()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_root_of_another_user_is_refused(tmp_path: pathlib.Path) -> None:
    folder, root = made_root(tmp_path)
    os.chown(root, 65534, 65534)
    with pytest.raises(ValueError, match="belongs to user id 65534"):
        Cache(folder, max_bytes=1 << 20).nbytes()


# -- a disk that cannot take a block; a folder that cannot be written ---------------------

#: Reads through a cache in this process; prints what came back, the warnings and the files
#: left in the cache's folder. ``limit``: a file size limit set after the Cache is made.
FULL = """
import json, os, resource, signal, sys, warnings
spec = json.loads(sys.argv[1])
from seekdata.remote import Cache
from seekdata.sources.remote import RemoteFile, Stores
data = bytes(range(256)) * 4096
out = {"warnings": []}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache = Cache(spec["dir"], max_bytes=1 << 20, block_bytes=spec["block"])
    if spec.get("limit"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["limit"], spec["limit"]))
    f = RemoteFile(Stores(spec["options"]), spec["url"])
    out["served"] = [cache.read(f, a, b) == data[a:b] for a, b in spec["spans"]]
    if spec.get("tar"):
        from seekdata.wds import TarShards
        ds = TarShards(spec["tar"], storage_options=spec["options"], cache=cache)
        out["tar"] = [ds[i]["__key__"] for i in range(len(ds))]
    out["nbytes"] = cache.nbytes()
out["warnings"] = [str(w.message) for w in caught]
out["files"] = sorted(os.listdir(cache.root))
print(json.dumps(out))
"""


def full_spec(proxy: Any, bucket: str, directory: pathlib.Path, **more: Any) -> str:
    spans = [(0, 10), (3 * BLOCK - 5, 5 * BLOCK + 5), (40 * BLOCK, 41 * BLOCK)]
    return json.dumps({"dir": str(directory), "block": BLOCK, "url": f"{bucket}/data.bin",
                       "options": _servers.s3_options(proxy), "spans": spans, **more})  # fmt: skip


def run_json(args: list[str]) -> dict[str, Any]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def assert_served_uncached(out: dict[str, Any], why: str) -> None:
    assert all(out["served"]), out
    assert len(out["warnings"]) == 1, out["warnings"]
    assert "could not keep fetched bytes in" in out["warnings"][0]
    assert why in out["warnings"][0] and "they are served, not kept" in out["warnings"][0]
    left = [n for n in out["files"] if ".tmp-" in n or n.endswith(".claim")]
    assert left == [], out["files"]


def test_a_file_size_limit_costs_the_cache_not_the_read(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    """A write past RLIMIT_FSIZE fails with EFBIG, as a full disk fails with ENOSPC."""
    spec = full_spec(proxy, bucket, tmp_path, limit=1000)  # a block's file is 4112 bytes
    out = run_json([sys.executable, "-c", FULL, spec])
    assert_served_uncached(out, "File too large")
    assert out["nbytes"] == 0 and not [n for n in out["files"] if n.endswith(".blk")]


def namespace(script: str) -> list[str]:
    """``sh -c script`` in a private mount namespace (a mount there is seen by nothing else),
    or a skip where this process may not make one."""
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True).returncode:
        pytest.skip("needs a private mount namespace (unshare --mount, CAP_SYS_ADMIN)")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def test_a_full_disk_costs_the_cache_not_the_read_nor_the_dataset(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    """A real ENOSPC: a 32 KiB tmpfs, mounted on a folder of ``tmp_path`` in a private mount
    namespace; the reads and a TarShards built through the cache fill it."""
    small = tmp_path / "small"
    small.mkdir()
    tar = corpus.pattern("tar", f"{bucket}/tar")
    spec = full_spec(proxy, bucket, small, tar=tar)
    mount = 'mount -t tmpfs -o size=32k tmpfs "$1" && exec "$2" -c "$3" "$4"'
    out = run_json([*namespace(mount), "sh", str(small), sys.executable, FULL, spec])
    assert_served_uncached(out, "No space left on device")
    assert out["tar"] == [f"k{n:05d}" for n in range(len(out["tar"]))] and len(out["tar"]) == 72
    assert list(small.iterdir()) == []  # the tmpfs was this process's mount namespace's only


#: Makes a Cache on ``sys.argv[1]`` and prints the error it gives, or "made".
MAKE = """
import sys
from seekdata.remote import Cache
try:
    Cache(sys.argv[1], max_bytes=1 << 20).nbytes()
except Exception as exc:
    print(type(exc).__name__ + ": " + str(exc))
else:
    print("made")
"""


def test_a_file_in_place_of_the_folder_is_one_clear_error_at_construction(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(ValueError, match=r"must be a directory .*(Not a directory|File exists)"):
        Cache(tmp_path / "a-file", max_bytes=1 << 20)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "seekdata-cache").write_text("not a folder")
    with pytest.raises(ValueError, match=r"seekdata-cache must be a directory .*Not a directory"):
        Cache(tmp_path / "cache", max_bytes=1 << 20)


@pytest.mark.parametrize("how", ["no write permission", "read-only mount"])
def test_a_folder_it_cannot_write_is_one_clear_error_at_construction(
    tmp_path: pathlib.Path, how: str
) -> None:
    """The tests run as root, which writes through permission bits: the folder without write
    permission is tried by a process without CAP_DAC_OVERRIDE (setpriv), or by this one when
    it is not root; the read-only bind mount is read-only for root too."""
    folder, root = made_root(tmp_path)
    if how == "no write permission":
        root.chmod(0o555)
        if os.geteuid() != 0:
            args = [sys.executable, "-c", MAKE, str(folder)]
        elif shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to drop CAP_DAC_OVERRIDE as root")
        else:
            drop = "--bounding-set=-dac_override,-dac_read_search"
            args = ["setpriv", drop, "--inh-caps=-all", sys.executable, "-c", MAKE, str(folder)]
    else:
        args = namespace('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
                         'exec "$2" -c "$3" "$4"')  # fmt: skip
        args = [*args, "sh", str(root), sys.executable, MAKE, str(folder)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    message = done.stdout.strip()
    assert message.startswith("ValueError: Cache: "), message
    assert "cannot create a file there" in message and "not a read-only one" in message
    assert ("Permission denied" if how == "no write permission" else "Read-only") in message


# -- two bounds on one folder: the smaller holds ------------------------------------------


def test_two_jobs_sharing_a_folder_keep_within_the_smaller_bound(
    bucket: str, proxy: Any, tmp_path: pathlib.Path
) -> None:
    big = Cache(tmp_path, max_bytes=8 * FILE, block_bytes=BLOCK)
    f = remote(proxy, bucket)
    assert big.read(f, 0, 8 * BLOCK) == DATA[: 8 * BLOCK]
    assert big.nbytes() == 8 * FILE
    small = Cache(tmp_path, max_bytes=3 * FILE, block_bytes=BLOCK)  # its own bound: no warning
    with pytest.warns(UserWarning, match=f"bounded at {3 * FILE} bytes by another Cache"):
        assert big.read(f, 20 * BLOCK, 21 * BLOCK) == DATA[20 * BLOCK : 21 * BLOCK]
    assert big.nbytes() <= 3 * FILE
    for block in range(30, 40):  # the larger job keeps within the smaller bound, silently now
        a = block * BLOCK
        assert big.read(f, a, a + 1) == DATA[a : a + 1]
        assert small.nbytes() <= 3 * FILE
    with pytest.warns(UserWarning, match=rf"not its max_bytes={100 * FILE}.*bound"):
        Cache(tmp_path, max_bytes=100 * FILE, block_bytes=BLOCK)  # a later job, told at once
