"""The ``seekdata`` command.

One argparse subcommand per task. To add one, write ``_add_<name>(subparsers)``
that registers its parser with ``set_defaults(run=_run_<name>)``, and list it in
:data:`_COMMANDS`. A command's ``run(args)`` returns the exit status; errors are
reported as :mod:`seekdata.tools._command` says. The tools are imported when their
parser is registered; none of them imports this module.
"""

from __future__ import annotations

import argparse
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
        help="build the byte-offset indexes of webdataset tar shards",
        description=(
            "Build the index TarShards uses for random access, for every shard the patterns "
            "name: <shard>.seekdata-index.json beside each shard, or under --index-dir. "
            "Up-to-date indexes are kept; a shard that changed since indexing is an error "
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
    parser.set_defaults(run=_run_index)


def _run_index(args: argparse.Namespace) -> int:
    from seekdata import _shardurls, _tarindex

    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    urls = [url for pattern in args.urls for url in _shardurls.expand_urls(pattern)]
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
    print(f"indexed {len(shards)} shards, {samples} samples; indexes {where}")
    return 0


def _progress_bar(items: Iterator[_T], total: int) -> Iterator[_T]:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional: no bar
        yield from items
        return
    bar = tqdm(total=total, unit="shard", file=sys.stderr, dynamic_ncols=True)
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
