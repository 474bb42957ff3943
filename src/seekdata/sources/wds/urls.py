"""The local file to read for each shard URL of :mod:`seekdata.wds` (a path, a ``file:`` URL, or
a ``pipe:`` command's output copied once). Names are expanded, and schemes parsed, by the floor
below (:mod:`seekdata.sources.files.paths`); remote URLs are read by byte range through
:mod:`seekdata.sources.remote`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from urllib.parse import urlparse

from seekdata.sources.files.paths import url_scheme
from seekdata.sources.remote.urls import SCHEMES

__all__ = ["local_path", "pipe_copy"]


def pipe_copy(url: str, index_dir: str) -> str:
    """Where the output of the ``pipe:`` URL ``url`` is kept, under ``index_dir``."""
    return os.path.join(index_dir, f"pipe-{hashlib.sha256(url.encode()).hexdigest()[:16]}.tar")


def local_path(url: str, *, index_dir: str | None, allow_pipe: bool) -> str:
    """The local file to read for ``url``; ``pipe:`` output is copied to ``index_dir`` once."""
    scheme = url_scheme(url)
    if scheme is None:
        return url
    if scheme == "file":
        return urlparse(url).path  # as webdataset opens it
    if scheme != "pipe":
        remote = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise ValueError(
            f"shard {url}: TarShards reads local paths, file:, pipe: and remote URLs ({remote}),"
            f" not {scheme!r} URLs; download or mount the shards, or fetch them once with a "
            "'pipe:' URL and allow_pipe=True, index_dir=..."
        )
    if not allow_pipe:
        raise ValueError(
            f"shard {url}: 'pipe:' URLs run a shell command, which is off by default; "
            "pass allow_pipe=True (--allow-pipe) if you trust the command"
        )
    if index_dir is None:
        raise ValueError(
            f"shard {url}: a pipe cannot seek, so TarShards copies its output to a local file "
            "once and reads that; pass index_dir= (--index-dir) for where the copies go"
        )
    dest = pipe_copy(url, index_dir)
    if os.path.exists(dest):
        return dest
    os.makedirs(index_dir, exist_ok=True)
    tmp = f"{dest}.part-{os.getpid()}"
    with open(tmp, "wb") as out:
        proc = subprocess.run(url[len("pipe:") :], shell=True, stdout=out, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        os.remove(tmp)
        stderr = proc.stderr.decode(errors="replace").strip()[-500:]
        raise ValueError(
            f"shard {url}: the pipe command exited with status {proc.returncode}: {stderr}"
        )
    os.replace(tmp, dest)
    return dest
