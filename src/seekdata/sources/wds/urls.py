"""Shard URLs for :mod:`seekdata.wds`: brace patterns expanded, and the local file to read
for each URL (a path, a ``file:`` URL, or a ``pipe:`` command's output copied once). Remote
URLs (:func:`is_remote`) are read by byte range through :mod:`seekdata.sources.remote`.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Iterable
from urllib.parse import urlparse

from seekdata.sources.remote.urls import SCHEMES, is_remote

__all__ = ["expand_urls", "is_remote", "local_path", "url_scheme"]

_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):")


def expand_urls(urls: object) -> list[str]:
    """Shard URLs from a brace pattern (``"shards-{000..099}.tar"``), a path, or a list."""
    import braceexpand

    if isinstance(urls, str):
        out = list(braceexpand.braceexpand(urls))
    elif isinstance(urls, os.PathLike):
        out = [os.fspath(urls)]
    elif isinstance(urls, Iterable) and not isinstance(urls, (bytes, bytearray)):
        out = [os.fspath(u) if isinstance(u, os.PathLike) else u for u in urls]
    else:
        raise TypeError(
            "urls: expected a brace pattern such as 'shards-{000..099}.tar', a path, "
            f"or a list of paths, got {type(urls).__name__}"
        )
    for url in out:
        if not isinstance(url, str):
            raise TypeError(f"urls: every shard must be a str or os.PathLike path, got {url!r}")
    if not out or "" in out:
        raise ValueError(
            f"urls: expected at least one shard, got {urls!r}, which names none "
            "(or an empty path); pass a brace pattern such as 'shards-{000..099}.tar' "
            "or a list of paths"
        )
    return out


def url_scheme(url: str) -> str | None:
    """The lower-cased scheme of ``url`` (``"pipe"``, ``"file"``, ...), None for a path."""
    match = _URL_SCHEME.match(url)
    return match.group(1).lower() if match else None


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
