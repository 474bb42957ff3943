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
import json
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
        epilog=_ENVIRONMENT,
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
    remote = parser.add_argument_group(
        "remote files",
        "s3://, gs://, az://, http(s):// and hf:// URLs are read by byte range; these options "
        "are the library's storage_options= (the fsspec filesystem's options)",
    )
    remote.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one storage option, repeatable; VALUE is parsed as JSON when it is JSON (true, "
        "3, {...}), else kept as a string: --storage-option endpoint_url=http://host:9000",
    )
    remote.add_argument(
        "--storage-options",
        metavar="JSON",
        help="all storage options as one JSON object, or @FILE to read it from a file "
        "(keeps secrets off the command line)",
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


#: Where the back-ends look when no storage option names a thing (--help says it).
_ENVIRONMENT = (
    "Without storage options, a remote store is reached the way its back-end finds it: S3 "
    "reads AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
    "AWS_SESSION_TOKEN, AWS_PROFILE, AWS_DEFAULT_REGION and ~/.aws; GCS "
    "GOOGLE_APPLICATION_CREDENTIALS; Azure AZURE_STORAGE_ACCOUNT_NAME, "
    "AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_SAS_TOKEN; the "
    "Hugging Face Hub HF_TOKEN. A storage option wins "
    "over the environment, e.g. --storage-option endpoint_url=http://127.0.0.1:9000."
)


def _run_index(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    options = _storage_options(args.storage_options, args.storage_option)
    from seekdata.sources.files import paths as _paths  # one grammar for every family

    if args.eos_id is not None:  # token files: the core install suffices (no webdataset)
        where = "seekdata index"
        names = [n for p in args.urls for n in _paths.expand(p, where, noun="token file")]
        return _run_index_tokens(args, names, _stores(names, options))
    from seekdata.sources.wds import tarindex as _tarindex

    example = "shards-{000..099}.tar"
    urls = [
        url
        for pattern in args.urls
        for url in _paths.expand(pattern, "seekdata index", noun="shard", example=example)
    ]
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
        stores=_stores(urls, options),
    )
    samples = sum(len(shard.index.keys) for shard in shards)
    where = args.index_dir if args.index_dir is not None else "beside the shards"
    done = _what_was_done(paths, before)
    print(f"{done}: {_count(len(shards), 'shard')}, {samples} samples; indexes {where}")
    return 0


def _storage_options(text: str | None, items: list[str]) -> dict[str, Any]:
    """The library's ``storage_options=`` from ``--storage-options JSON`` (or ``@FILE``) and
    each ``--storage-option KEY=VALUE``. A value is never quoted in an error: it may be a
    secret."""
    options: dict[str, Any] = {}
    if text is not None:
        where = "--storage-options"
        if text.startswith("@"):
            where = f"--storage-options {text}"
            with open(text[1:], encoding="utf-8") as f:  # an OSError names the file: exit 2
                text = f.read()
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where} must be a JSON object such as "
                f'\'{{"endpoint_url": "http://127.0.0.1:9000"}}\'; it is not JSON ({exc.msg} '
                f"at character {exc.pos}); quote it for the shell, or use --storage-option "
                "KEY=VALUE"
            ) from None  # the cause quotes the text, which may hold a secret
        if not isinstance(value, dict):
            raise ValueError(
                f"{where} must be a JSON object of options (the fsspec filesystem's, as "
                f"storage_options= takes them); got a JSON {_JSON_KINDS[type(value)]}; write "
                'them as {"name": value, ...}'
            )
        options.update(value)
    for item in items:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(
                "--storage-option must be KEY=VALUE, e.g. --storage-option "
                "endpoint_url=http://127.0.0.1:9000; got one without "
                + ("'='" if not eq else "a key before '='")
            )
        if key in options:
            raise ValueError(
                f"storage option {key!r} is given twice (in --storage-options or another "
                "--storage-option); give each option once"
            )
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw  # a plain string: an endpoint, a profile's name
    return options


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_JSON_KINDS[type(None)] = "null"


def _stores(urls: list[str], options: dict[str, Any]) -> Any:
    """One :class:`~seekdata.sources.remote.Stores` for every remote file, None when all are
    local. One for all is what keeps the command's memory flat: each store's client (an S3
    client holds ~14 MB and takes ~0.3 s to make) is made once, not once per file."""
    from seekdata.sources import remote

    if not any(map(remote.is_remote, urls)):
        if options:
            raise ValueError(
                "storage options are for remote files (s3://, gs://, az://, http(s)://, hf://); "
                f"every file given is local ({urls[0]}, ...); drop --storage-option(s), or name "
                "the remote files"
            )
        return None
    return remote.Stores(options)


def _shard_index(url: str, index_dir: str | None) -> str | None:
    """Where the index of the shard ``url`` is, found without reading it or running a pipe."""
    from seekdata.sources.files import paths as _paths
    from seekdata.sources.wds import tarindex as _tarindex
    from seekdata.sources.wds import urls as _urls

    scheme = _paths.url_scheme(url)
    if scheme == "pipe":
        if index_dir is None:
            return None  # refused by the indexing itself
        return _tarindex.index_path(_urls.pipe_copy(url, index_dir), index_dir)
    if scheme not in (None, "file"):
        return None
    path = _urls.local_path(url, index_dir=index_dir, allow_pipe=False)
    return _tarindex.index_path(path, index_dir)


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    """An index file's identity, to tell one written now from one found current."""
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


def _what_was_done(paths: list[str | None], before: list[tuple[int, int, int] | None]) -> str:
    """'built 2 indexes, found 1 current': an index is built when its file is new or rewritten.
    A remote index (its path None) is not stamped: one more request per file to tell which."""
    known = [(p, b) for p, b in zip(paths, before, strict=True) if p is not None]
    built = sum(b is None or _stamp(p) != b for p, b in known)
    remote = len(paths) - len(known)
    if remote == len(paths):
        return f"built or found current {_count(remote, 'remote index', 'remote indexes')}"
    done = f"built {_count(built, 'index', 'indexes')}, found {len(known) - built} current"
    return done + (f", built or found current {remote} remote" if remote else "")


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


#: File names that are token files, not tar shards, when given without ``--eos-id``.
_TOKEN_SUFFIXES = (".bin", ".npy", ".u16", ".u32")


def _run_index_tokens(args: argparse.Namespace, names: list[str], stores: Any) -> int:
    import numpy as np

    from seekdata.sources import remote as _remote
    from seekdata.sources.tokens import files as _files
    from seekdata.sources.tokens import index as _index

    if args.allow_pipe:
        raise ValueError("--allow-pipe is for tar shards; token files are read in place")
    try:
        named = np.dtype(args.dtype)
    except TypeError as exc:
        raise ValueError(
            f"--dtype must name a numpy integer dtype such as uint16; got {args.dtype!r}"
        ) from exc
    dtype = _files.check_dtype(named, "--dtype")
    if args.vocab_size is not None and args.vocab_size < 1:
        raise ValueError(f"--vocab-size must be at least 1, got {args.vocab_size}")
    info = np.iinfo(dtype)
    if not info.min <= args.eos_id <= info.max:
        raise ValueError(f"--eos-id {args.eos_id} cannot occur in {dtype} token files")
    paths: list[str | None] = [
        None
        if stores is not None and _remote.is_remote(name)
        else _index.index_path(name, args.index_dir)
        for name in names
    ]  # a remote file's index is not stamped (see _what_was_done)
    before = [_stamp(path) for path in paths]
    indexed = _index.index_files(
        names,
        dtype=dtype,
        eos_id=args.eos_id,
        vocab_size=args.vocab_size,
        index_dir=args.index_dir,
        force=args.force,
        jobs=args.jobs,
        progress=functools.partial(_progress_bar, unit="file"),
        stores=stores,
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
