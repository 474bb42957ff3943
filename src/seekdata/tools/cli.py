"""The ``seekdata`` command.

One argparse subcommand per task. To add one, write ``_add_<name>(subparsers)``
that registers its parser with ``set_defaults(run=_run_<name>)``, and list it in
:data:`_COMMANDS`. A command's ``run(args)`` returns the exit status; errors are
reported as :mod:`seekdata.tools._command` says. The tools are imported when their
parser is registered; none of them imports this module.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from seekdata.tools import _command

__all__ = ["build_parser", "main"]

_T = TypeVar("_T")
_Subparsers = Any  # argparse's _SubParsersAction is private


def _add_index(subparsers: _Subparsers) -> None:
    parser = subparsers.add_parser(
        "index",
        help="build the indexes of webdataset tar shards, or of token files (--eos-id)",
        description=(
            "Build the index TarShards uses for random access, for every shard the patterns "
            "name: <shard>.seekdata-index.json beside each shard, or under --index-dir. "
            "With --eos-id, the files are token files instead, and the index is the document "
            "boundaries seekdata.tokens.PackedDocuments reads: <file>.seekdata-docs. "
            "Up-to-date indexes are kept; a file that changed since indexing is an error "
            "unless --force."
        ),
    )
    parser.add_argument(
        "urls",
        nargs="+",
        metavar="PATTERN",
        help="shard paths or brace patterns, e.g. 'shards-{000..099}.tar' (quote it)",
    )
    parser.add_argument(
        "--index-dir", metavar="DIR", help="where to write the indexes (default: beside each shard)"
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild every index, even current ones"
    )
    parser.add_argument(
        "--allow-pipe",
        action="store_true",
        help="accept 'pipe:CMD' URLs: run CMD once and keep a copy of its output in --index-dir",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="processes scanning shards at once (default 1)",
    )
    tokens = parser.add_argument_group(
        "token files", "index flat token files (raw binaries or .npy) instead of tar shards"
    )
    tokens.add_argument(
        "--eos-id",
        type=int,
        metavar="ID",
        help="the end-of-document token: index the files' document boundaries",
    )
    tokens.add_argument(
        "--dtype",
        default="uint16",
        metavar="DTYPE",
        help="the token files' integer dtype (default uint16)",
    )
    tokens.add_argument(
        "--vocab-size",
        type=int,
        metavar="N",
        help="refuse a file holding a token id outside [0, N)",
    )
    parser.set_defaults(run=_run_index)


def _run_index(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.eos_id is not None:  # token files: the core install suffices (no webdataset)
        from seekdata.sources.tokens import files as _tokenfiles

        where = "seekdata index"
        names = [n for pattern in args.urls for n in _tokenfiles.expand_files(pattern, where)]
        return _run_index_tokens(args, names)
    from seekdata.sources.wds import tarindex as _tarindex
    from seekdata.sources.wds import urls as _shardurls

    urls = [url for pattern in args.urls for url in _shardurls.expand_urls(pattern)]
    tokens = [url for url in urls if url.endswith(_TOKEN_SUFFIXES)]
    if tokens or args.vocab_size is not None:
        raise ValueError(
            f"{tokens[0] if tokens else '--vocab-size'}: token files are indexed by their "
            "end-of-document token; pass --eos-id ID (and --dtype if not uint16)"
        )
    paths = [_shard_index(url, args.index_dir) for url in urls]
    before = [_stamp(path) for path in paths]
    shards = _tarindex.index_shards(
        urls,
        index_dir=args.index_dir,
        allow_pipe=args.allow_pipe,
        force=args.force,
        jobs=args.jobs,
        progress=_progress_bar,
    )
    samples = sum(len(shard.index.keys) for shard in shards)
    where = args.index_dir if args.index_dir is not None else "beside the shards"
    done = _what_was_done(paths, before)
    print(f"{done}: {_count(len(shards), 'shard')}, {samples} samples; indexes {where}")
    return 0


def _shard_index(url: str, index_dir: str | None) -> str | None:
    """Where the index of the shard ``url`` is, found without reading it or running a pipe."""
    from seekdata.sources.wds import tarindex as _tarindex
    from seekdata.sources.wds import urls as _shardurls

    scheme = _shardurls.url_scheme(url)
    if scheme == "pipe":
        if index_dir is None:
            return None  # refused by the indexing itself
        return _tarindex.index_path(_shardurls.pipe_copy(url, index_dir), index_dir)
    if scheme not in (None, "file"):
        return None
    path = _shardurls.local_path(url, index_dir=index_dir, allow_pipe=False)
    return _tarindex.index_path(path, index_dir)


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    """An index file's identity, to tell one written now from one found current."""
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


def _what_was_done(paths: list[str | None], before: list[tuple[int, int, int] | None]) -> str:
    """'built 2 indexes, found 1 current': an index is built when its file is new or rewritten."""
    built = sum(b is None or _stamp(p) != b for p, b in zip(paths, before, strict=True))
    return f"built {_count(built, 'index', 'indexes')}, found {len(paths) - built} current"


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


#: File names that are token files, not tar shards, when given without ``--eos-id``.
_TOKEN_SUFFIXES = (".bin", ".npy", ".u16", ".u32")


def _run_index_tokens(args: argparse.Namespace, names: list[str]) -> int:
    import numpy as np

    from seekdata.sources.tokens import files as _tokenfiles
    from seekdata.sources.tokens import index as _tokenindex

    if args.allow_pipe:
        raise ValueError("--allow-pipe is for tar shards; token files are read in place")
    try:
        named = np.dtype(args.dtype)
    except TypeError as exc:
        raise ValueError(
            f"--dtype must name a numpy integer dtype such as uint16; got {args.dtype!r}"
        ) from exc
    dtype = _tokenfiles.check_dtype(named, "--dtype")
    if args.vocab_size is not None and args.vocab_size < 1:
        raise ValueError(f"--vocab-size must be at least 1, got {args.vocab_size}")
    info = np.iinfo(dtype)
    if not info.min <= args.eos_id <= info.max:
        raise ValueError(f"--eos-id {args.eos_id} cannot occur in {dtype} token files")
    paths: list[str | None] = [_tokenindex.index_path(name, args.index_dir) for name in names]
    before = [_stamp(path) for path in paths]
    indexed = _tokenindex.index_files(
        names,
        dtype=dtype,
        eos_id=args.eos_id,
        vocab_size=args.vocab_size,
        index_dir=args.index_dir,
        force=args.force,
        jobs=args.jobs,
        progress=functools.partial(_progress_bar, unit="file"),
    )
    documents = sum(i.documents for i in indexed)
    tokens = sum(i.tokens for i in indexed)
    where = args.index_dir if args.index_dir is not None else "beside the files"
    print(
        f"{_what_was_done(paths, before)}: {_count(len(indexed), 'token file')}, {tokens} "
        f"tokens, {documents} documents; indexes {where}"
    )
    return 0


def _progress_bar(items: Iterator[_T], total: int, unit: str = "shard") -> Iterator[_T]:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional: no bar
        yield from items
        return
    bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)
    try:
        for item in items:
            bar.update(1)
            yield item
    except BaseException:
        bar.leave = False  # the error message replaces the bar
        raise
    finally:
        bar.close()


def _add_inspect(subparsers: _Subparsers) -> None:
    from seekdata.tools import inspection

    inspection.add_parser(subparsers)


def _add_verify(subparsers: _Subparsers) -> None:
    from seekdata.tools import verify

    verify.add_parser(subparsers)


def _add_bench(subparsers: _Subparsers) -> None:
    from seekdata.tools import bench

    bench.add_parser(subparsers)


_COMMANDS: tuple[Callable[[_Subparsers], None], ...] = (
    _add_index,
    _add_inspect,
    _add_verify,
    _add_bench,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``seekdata`` argument parser, with every subcommand registered."""
    return _command.build_parser(_COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``seekdata`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    return _command.run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
