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
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from seekdata.tools import _command

__all__ = ["build_parser", "main"]

_T = TypeVar("_T")
_Subparsers = Any  # argparse's _SubParsersAction is private


def _add_index(subparsers: _Subparsers) -> None:
    parser = subparsers.add_parser(
        "index",
        help="build the indexes and the manifest of tar shards, token files (--eos-id) or "
        "Parquet files",
        description=(
            "Build the index TarShards uses for random access, for every shard the patterns "
            "name: <shard>.seekdata-index.json beside each shard, or under --index-dir. "
            "With --eos-id, the files are token files instead, and the index is the document "
            "boundaries seekdata.tokens.PackedDocuments reads: <file>.seekdata-docs; *.parquet "
            "files get their footers kept. Then, in each folder, the manifest "
            "(seekdata-manifest-<family>.json): what a dataset needs of every file at "
            "construction, read in one request (docs/scale.md). Up-to-date indexes are kept, so "
            "a killed build resumes where it stopped; a file that changed since indexing is an "
            "error unless --force. --part I/N splits the files among machines."
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
    parser.add_argument(
        "--part",
        metavar="I/N",
        help="index only part I of N (files i with i %% N == I of the sorted list), e.g. "
        "--part $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT or --part $RANK/$WORLD_SIZE; the "
        "run that finds all N parts done writes the manifests",
    )
    parser.add_argument(
        "--merge",
        type=int,
        metavar="N",
        help="index nothing: write the manifests from the records of a build split in N parts "
        "(when its parts could not: say they ran on machines that do not share the folder)",
    )
    parser.add_argument(
        "--no-manifest",
        action="store_true",
        help="build the per-file indexes only, as releases before manifests did",
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
        "--seq-len",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="also count the packed sequences of each block for PackedDocuments(seq_len=N) "
        "(repeatable): it then packs lazily from the manifest's counts",
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
    from seekdata.tools import indexing as _indexing

    part = None if args.part is None else _indexing.check_part(args.part)
    if args.merge is not None and (args.merge < 1 or part is not None or args.no_manifest):
        raise ValueError(
            f"--merge N takes the number of parts (at least 1), without --part or "
            f"--no-manifest; got --merge {args.merge}"
            + (f" with --part {args.part}" if part is not None else "")
        )
    if args.no_manifest and part is not None:
        raise ValueError("--part splits a build whose parts meet in the manifest; drop "
                         "--no-manifest")  # fmt: skip
    if args.seq_len and args.eos_id is None:
        raise ValueError("--seq-len counts packed sequences of token files; pass --eos-id too")
    options = _storage_options(args.storage_options, args.storage_option)
    from seekdata.sources.files import paths as _paths  # one grammar for every family

    if args.eos_id is not None:  # token files: the core install suffices (no webdataset)
        where = "seekdata index"
        names = [n for p in args.urls for n in _paths.expand(p, where, noun="token file")]
        return _run_index_tokens(args, names, _stores(names, options), part)
    example = "shards-{000..099}.tar"
    urls = [
        url
        for pattern in args.urls
        for url in _paths.expand(pattern, "seekdata index", noun="shard", example=example)
    ]
    parquet = [url for url in urls if url.endswith(".parquet")]
    if parquet:
        if len(parquet) != len(urls):
            other = next(url for url in urls if not url.endswith(".parquet"))
            raise ValueError(
                f"{other}: seekdata index takes files of one family at a time, and "
                f"{parquet[0]} is a Parquet file; index the Parquet files and the others in "
                "two runs"
            )
        return _run_index_parquet(args, urls, _stores(urls, options), part)
    tokens = [url for url in urls if url.endswith(_TOKEN_SUFFIXES)]
    if tokens or args.vocab_size is not None:
        raise ValueError(
            f"{tokens[0] if tokens else '--vocab-size'}: token files are indexed by their "
            "end-of-document token; pass --eos-id ID (and --dtype if not uint16)"
        )
    stores = _stores(urls, options)
    family = _indexing.Family("tar")
    if args.merge is not None:
        return _merge_only(args, urls, family, stores)
    from seekdata.sources.wds import tarindex as _tarindex

    mine = _my_part(urls, part)
    started = time.monotonic()
    paths = [_shard_index(url, args.index_dir) for url in mine]
    before = [_stamp(path) for path in paths]
    entries = _tarindex.index_entries(
        mine,
        index_dir=args.index_dir,
        allow_pipe=args.allow_pipe,
        force=args.force,
        jobs=args.jobs,
        progress=functools.partial(_progress_bar, size=lambda e: e["size"], start=started),
        stores=stores,
        check_keys=part is None,  # a part's shards are not consecutive: datasets check theirs
    )
    samples = sum(entry["items"] for entry in entries)
    where = args.index_dir if args.index_dir is not None else "beside the shards"
    done = _what_was_done(paths, before)
    print(f"{done}: {_count(len(mine), 'shard')}, {samples} samples; indexes {where}")
    _manifests(args, urls, mine, entries, family, stores, part)
    return 0


def _my_part(urls: list[str], part: tuple[int, int] | None) -> list[str]:
    """The files this run indexes: all, or part I of N (i % N == I of the sorted list)."""
    if part is None:
        return urls
    i, n = part
    return [url for k, url in enumerate(sorted(urls)) if k % n == i]


def _manifests(
    args: argparse.Namespace,
    urls: list[str],
    mine: list[str],
    entries: list[dict[str, Any]],
    family: Any,
    stores: Any,
    part: tuple[int, int] | None,
) -> None:
    """Write the manifests of the folders of ``urls`` (this run indexed ``mine``, whose
    ``entries`` these are), or this part's records and the manifests whose parts are all
    done; say what was written."""
    from seekdata.tools import indexing as _indexing

    if args.no_manifest:
        return
    of = dict(zip(mine, entries, strict=True))
    if part is None:
        groups = _indexing.by_folder(mine, entries)
        written = _indexing.write_manifests(groups, family, stores=stores, index_dir=args.index_dir)
    else:
        groups = _indexing.by_folder(urls, [of.get(url) for url in urls])
        _indexing.write_part_records(groups, family, part, stores=stores, index_dir=args.index_dir)
        written, missing = _indexing.merge_parts(
            groups, family, part[1], stores=stores, index_dir=args.index_dir
        )
        if missing:
            print(
                f"part {part[0]}/{part[1]} recorded; each folder's manifest is written by the "
                f"run that finds all {part[1]} parts done ({len(missing)} part records to come)"
            )
    for url, files in written:
        print(f"manifest {url}: {_count(files, 'file')}")


def _merge_only(args: argparse.Namespace, urls: list[str], family: Any, stores: Any) -> int:
    from seekdata.sources.files import manifest as _manifest
    from seekdata.tools import indexing as _indexing

    folders = dict.fromkeys(f for f in map(_manifest.folder_of, urls) if f is not None)
    written, _ = _indexing.merge_parts(
        folders, family, args.merge, stores=stores, index_dir=args.index_dir, required=True
    )
    for url, files in written:
        print(f"manifest {url}: {_count(files, 'file')}")
    return 0


def _parquet_entry(url: str, *, stores: Any, index_dir: str | None) -> dict[str, Any]:
    from seekdata.sources.parquet import footers

    _footers: Any = footers  # its manifest functions: the Parquet family's (typed there)
    return dict(_footers.manifest_entry(url, stores=stores, index_dir=index_dir))


def _run_index_parquet(
    args: argparse.Namespace, urls: list[str], stores: Any, part: tuple[int, int] | None
) -> int:
    """Parquet files: each footer read (a remote one kept under --index-dir or beside it),
    then the manifests, each distinct schema listed once."""
    from seekdata.sources.parquet import footers
    from seekdata.tools import indexing as _indexing

    _footers: Any = footers
    if args.allow_pipe or args.vocab_size is not None:
        raise ValueError("--allow-pipe and --vocab-size are not for Parquet files")
    if not hasattr(_footers, "manifest_entry"):
        raise ValueError(
            "this release reads Parquet footers when a dataset is built and keeps no manifest "
            "of them; `seekdata index` indexes tar shards and token files (--eos-id)"
        )

    def schemas(folder: str, entries: list[Any], old: dict[str, Any]) -> tuple[list[Any], Any]:
        return _footers.intern_schemas(entries, old.get("schemas", []))

    family = _indexing.Family("parquet", sections=schemas)
    if args.merge is not None:
        return _merge_only(args, urls, family, stores)
    mine = _my_part(urls, part)
    fn = _indexing.partial(_parquet_entry, stores=stores, index_dir=args.index_dir)
    progress = functools.partial(_progress_bar, unit="file", size=lambda e: e["size"])
    entries = _indexing.entries_in_processes(fn, mine, args.jobs, progress)
    rows = sum(int(e["items"]) for e in entries)
    print(f"read {_count(len(mine), 'Parquet footer')}: {rows} rows")
    _manifests(args, urls, mine, entries, family, stores, part)
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


def _run_index_tokens(
    args: argparse.Namespace, names: list[str], stores: Any, part: tuple[int, int] | None = None
) -> int:
    import numpy as np

    from seekdata.sources import remote as _remote
    from seekdata.sources.tokens import files as _files
    from seekdata.sources.tokens import index
    from seekdata.tools import indexing as _indexing

    _index: Any = index
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
    if any(n < 1 for n in args.seq_len):
        raise ValueError(f"--seq-len must be at least 1, got {min(args.seq_len)}")
    manifests = hasattr(_index, "manifest_entry") and not args.no_manifest
    if not manifests and (part is not None or args.merge is not None or args.seq_len):
        raise ValueError(
            "--part, --merge and --seq-len write token manifests, which this release's token "
            "indexes do not describe; index the files without them"
        )
    family = _indexing.Family("tokens")
    if manifests:
        family.params = _index.manifest_params(dtype, args.eos_id)
        family.sections = functools.partial(
            _packing_section, dtype=dtype, eos_id=args.eos_id, seq_lens=args.seq_len,
            stores=stores, index_dir=args.index_dir, jobs=args.jobs,
        )  # fmt: skip
    if args.merge is not None:
        return _merge_only(args, names, family, stores)
    mine = _my_part(names, part)
    paths: list[str | None] = [
        None
        if stores is not None and _remote.is_remote(name)
        else _index.index_path(name, args.index_dir)
        for name in mine
    ]  # a remote file's index is not stamped (see _what_was_done)
    before = [_stamp(path) for path in paths]
    progress = functools.partial(_progress_bar, unit="file")
    if not manifests:
        indexed = _index.index_files(
            mine, dtype=dtype, eos_id=args.eos_id, vocab_size=args.vocab_size,
            index_dir=args.index_dir, force=args.force, jobs=args.jobs, progress=progress,
            stores=stores,
        )  # fmt: skip
        documents = sum(i.documents for i in indexed)
        tokens = sum(i.tokens for i in indexed)
        entries: list[dict[str, Any]] = []
    else:
        fn = _indexing.partial(
            _token_entry, dtype=dtype, eos_id=args.eos_id, vocab_size=args.vocab_size,
            index_dir=args.index_dir, force=args.force, stores=stores,
        )  # fmt: skip
        progress = functools.partial(progress, size=lambda e: e["size"])
        entries = _indexing.entries_in_processes(fn, mine, args.jobs, progress)
        documents = sum(int(e["documents"]) for e in entries)
        tokens = sum(int(e["items"]) for e in entries)
    where = args.index_dir if args.index_dir is not None else "beside the files"
    print(
        f"{_what_was_done(paths, before)}: {_count(len(mine), 'token file')}, {tokens} "
        f"tokens, {documents} documents; indexes {where}"
    )
    if manifests:
        _manifests(args, names, mine, entries, family, stores, part)
    return 0


def _token_entry(
    name: str,
    *,
    dtype: Any,
    eos_id: int,
    vocab_size: int | None,
    index_dir: str | None,
    force: bool,
    stores: Any,
) -> dict[str, Any]:
    """One token file indexed (or found current) and its manifest row; in a worker process."""
    from seekdata.sources.tokens import files as _files
    from seekdata.sources.tokens import index

    _index: Any = index  # its manifest functions: the tokens family's (typed there)
    f = _files.describe(name, dtype, stores=stores)
    built = _index.load_or_build(f, dtype, eos_id, index_dir=index_dir, force=force)
    if vocab_size is not None:
        _index.check_vocab(f, built.min_id, built.max_id, dtype, vocab_size)
    return dict(_index.manifest_entry(built, name))


def _packing_section(
    folder: str,
    entries: list[dict[str, Any]],
    old: dict[str, Any],
    *,
    dtype: Any,
    eos_id: int,
    seq_lens: list[int],
    stores: Any,
    index_dir: str | None,
    jobs: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A tokens manifest's sections: with --seq-len, the packed sequences per block of the
    folder's documents, every file in name order (their indexes are current: read back)."""
    if not seq_lens:
        return entries, {}  # counts of an earlier build may be of other files: not kept
    from seekdata.sources import remote as _remote
    from seekdata.sources.tokens import files as _files
    from seekdata.sources.tokens import index

    _index: Any = index

    def join(name: str) -> str:
        return f"{folder}/{name}" if _remote.is_remote(folder) else os.path.join(folder, name)

    indexes = (
        _index.load_or_build(
            _files.describe(join(e["name"]), dtype, stores=stores),
            dtype,
            eos_id,
            index_dir=index_dir,
        )
        for e in entries
    )
    return entries, {"packing": _index.packing_section(indexes, seq_lens, jobs)}


#: Seconds between two plain progress lines when stderr is not a terminal.
PROGRESS_EVERY_S = 5.0


def _progress_bar(
    items: Iterator[_T],
    total: int,
    unit: str = "shard",
    size: Callable[[_T], int] | None = None,
    start: float | None = None,
) -> Iterator[_T]:
    """Pass ``items`` on, showing progress on stderr: files/s, bytes/s (``size`` of an item)
    and time left — a bar on a terminal (tqdm, when installed), else a plain line every
    :data:`PROGRESS_EVERY_S` seconds and one at the end (a batch job's log). Holds no item.
    ``start``: when the work began (``time.monotonic()``; default: the first item asked)."""
    tty = sys.stderr.isatty()
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tty and tqdm is not None:
        yield from _tqdm_bar(tqdm, items, total, unit, size)
        return
    start = time.monotonic() if start is None else start
    last = time.monotonic()
    done = nbytes = 0
    for item in items:
        done += 1
        nbytes += size(item) if size is not None else 0
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S:
            last = now
            print(_progress_line(done, total, nbytes, now - start, unit), file=sys.stderr)
        yield item
        del item
    line = _progress_line(done, total, nbytes, time.monotonic() - start, unit)
    print(line, file=sys.stderr)


def _tqdm_bar(
    tqdm: Any, items: Iterator[_T], total: int, unit: str, size: Callable[[_T], int] | None
) -> Iterator[_T]:
    bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)
    start, nbytes = time.monotonic(), 0
    try:
        for item in items:
            bar.update(1)
            if size is not None:
                nbytes += size(item)
                rate = nbytes / max(time.monotonic() - start, 1e-9)
                bar.set_postfix_str(f"{_bytes(rate)}/s", refresh=False)
            yield item
            del item
    except BaseException:
        bar.leave = False  # the error message replaces the bar
        raise
    finally:
        bar.close()


def _progress_line(done: int, total: int, nbytes: int, elapsed: float, unit: str) -> str:
    rate = done / elapsed if elapsed > 0 else 0.0
    left = (total - done) / rate if rate > 0 else 0.0
    data = f", {_bytes(nbytes / elapsed)}/s" if nbytes and elapsed > 0 else ""
    return (
        f"{done}/{total} {unit}s indexed, {rate:.1f} {unit}s/s{data}, "
        f"{_duration(left)} left" if done < total else
        f"{done}/{total} {unit}s indexed in {_duration(elapsed)} ({rate:.1f} {unit}s/s{data})"
    )  # fmt: skip


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


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
