"""The one grammar that names the files of a file-backed source, local or remote.

``urls`` (``files`` for the token corpora) is one of:

- a path or URL (``str`` or ``os.PathLike``): ``"train.bin"``, ``"s3://bucket/a.parquet"``;
- a brace pattern, any ``str`` with a ``{``: ``"shards-{000..099}.tar"``,
  ``"s3://b/train-{00000..00009}.parquet"``, ``"{a,b}-{0..3}.bin"`` (bash's brace expansion:
  lists, numeric and letter ranges with their zero padding and an optional step, ``\\{`` for a
  literal brace), expanded by the ``braceexpand`` package, a base dependency of seekdata;
- a list (any iterable but a ``str`` or ``bytes``) of paths or URLs, in order.

Globs are not expanded: a remote store would need a listing, whose order is not the files'
order; pass ``sorted(glob.glob(...))``. The scheme of each URL decides how it is read:
:func:`seekdata.sources.remote.urls.url_scheme` is the one parser (``pipe:``, ``file:``, and the
remote schemes of :data:`seekdata.sources.remote.SCHEMES`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from seekdata._core.checks import ArgumentError
from seekdata.sources.remote.urls import is_remote, scheme_of, url_scheme

__all__ = ["braces", "expand", "is_remote", "scheme_of", "url_scheme"]


#: One ascending numeric range and nothing else to expand (``shards-{00000..99999}.tar``): the
#: common case, expanded here in a list comprehension (braceexpand takes ~1 s for 10^5 names).
_ONE_RANGE = re.compile(r"([^{}\\]*)\{(\d+)\.\.(\d+)\}([^{}\\]*)")


def _one_range(pattern: str) -> list[str] | None:
    """The names of a pattern with one ascending numeric range only, padded as braceexpand
    pads (to the longer bound when either starts with 0); None for any other pattern."""
    match = _ONE_RANGE.fullmatch(pattern)
    if match is None:
        return None
    head, a, b, tail = match.groups()
    if int(a) > int(b):
        return None
    width = max(len(a), len(b)) if any(x.startswith("0") and x != "0" for x in (a, b)) else 0
    return [f"{head}{i:0{width}d}{tail}" for i in range(int(a), int(b) + 1)]


def braces(pattern: str, where: str) -> list[str]:
    """The names a brace pattern stands for; a ``ValueError`` for unbalanced braces."""
    quick = _one_range(pattern)
    if quick is not None:
        return quick
    try:
        import braceexpand
    except ImportError as exc:
        raise ImportError(
            f"{where}: a brace pattern needs the braceexpand package, a dependency of seekdata; "
            f"got {pattern!r}; pip install -e '.[webdataset]' in a clone of seekdata (or "
            "braceexpand), or pass a list of paths"
        ) from exc
    try:
        return list(braceexpand.braceexpand(pattern))
    except ValueError as exc:  # braceexpand's UnbalancedBracesError
        raise ValueError(
            f"{where}: {pattern!r} is a brace pattern with unbalanced braces ({exc}); pass a "
            "pattern whose braces pair up, e.g. 'shards-{000..099}.tar', or escape a literal "
            "brace as \\{"
        ) from exc


def expand(
    urls: Any, where: str, *, noun: str = "file", example: str = "train-{00..09}.bin"
) -> list[str]:
    """The names ``urls`` stands for, in order (the module docstring's grammar); at least one,
    each a non-empty ``str``. ``noun`` and ``example`` name the family's files in messages."""
    if isinstance(urls, str):
        names = braces(urls, where) if "{" in urls else [urls]
    elif isinstance(urls, os.PathLike):
        names = [os.fspath(urls)]
    elif isinstance(urls, Iterable) and not isinstance(urls, bytes | bytearray):
        names = [os.fspath(u) if isinstance(u, os.PathLike) else u for u in urls]
    else:
        raise TypeError(
            f"{where}: expected a brace pattern such as {example!r}, a path or URL, or a list "
            f"of them; got {type(urls).__name__}; pass a path such as 'data/a.bin' as a str, or a "
            "list of them"
        )
    for name in names:
        if not isinstance(name, str):
            raise ArgumentError(
                f"{where}: every {noun} must be a str or os.PathLike path, got {name!r}; pass "
                "paths or URLs as str"
            )
    if not names or "" in names:
        raise ValueError(
            f"{where}: expected at least one {noun}, got {urls!r}, which names none (or an "
            f"empty path); pass a brace pattern such as {example!r} or a list of paths"
        )
    return names
