"""``seekdata index -j 2`` stopped by a signal to its main process only (``kill PID``; SIGKILL)
leaves no worker process behind: a pool's workers wait on a pipe and never learn that their
parent died, so each asks the kernel to end it with its parent (Linux). Real processes, bounded
in time; the test never waits on the build's speed (it signals once the first index is written,
of a build of thousands of shards)."""

from __future__ import annotations

import io
import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from seekdata.sources.wds import tarindex
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

SHARDS = 3000


def write(folder: pathlib.Path) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for k in range(100):
            info = tarfile.TarInfo(f"s{k:03d}.bin")
            info.size = 64
            tar.addfile(info, io.BytesIO(bytes([k]) * 64))
    data = buf.getvalue()  # every shard the same bytes: the scan, not the writing, takes time
    for i in range(SHARDS):
        (folder / f"shard-{i:05d}.tar").write_bytes(data)
    return str(folder / f"shard-{{00000..{SHARDS - 1:05d}}}.tar")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_to_the_main_process_ends_its_workers_too(
    tmp_path: pathlib.Path, sig: signal.Signals
) -> None:
    pattern = write(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "seekdata", "index", "-j", "2", pattern],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any(tmp_path.glob("*" + tarindex.INDEX_SUFFIX)):
            assert proc.poll() is None, "the build ended before its first index was seen"
            assert time.monotonic() < deadline, "no index written in 120 s"
            time.sleep(0.02)
        done = sum(1 for _ in tmp_path.glob("*" + tarindex.INDEX_SUFFIX))
        assert done < SHARDS  # still building: the workers are busy
        proc.send_signal(sig)  # the main process only, as `kill PID` sends it
        assert proc.wait(timeout=30) == -sig
        deadline = time.monotonic() + 20
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_alive(proc.pid), "a worker of the index build outlived its parent"
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
