"""The manifests ``seekdata index`` writes, and how a build split across machines meets.

Each file's own index is written (atomically) as soon as that file is done, so a killed build
loses nothing finished: a rerun finds those indexes current and indexes only the rest. The
manifest of each folder (:mod:`seekdata.sources.files.manifest`) is written last, from the
entries of every file of the folder the run indexed, merged with the folder's manifest as it
was (an entry of a file indexed now replaces its old one; other files keep theirs), so
indexing new shards of a folder adds them.

A build split across machines (``--part I/N``, any launcher): part ``I`` indexes the files
``i`` with ``i % N == I`` of the sorted expanded list, then writes, for every folder of the
list, a part record (``seekdata-manifest-<family>.part-I-of-N.json``: the entries of its
files there, possibly none). The run that then finds all ``N`` records of a folder — whichever
part finishes last, or ``seekdata index --merge N`` — merges them into the folder's manifest
and removes them. Two parts that finish together both write the same manifest. The manifest is
byte for byte the one a single process writes (but its ``created`` time).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seekdata.sources.files import manifest as _manifest
from seekdata.sources.files import processes as _processes

__all__ = ["Family", "check_part", "merge_parts", "write_manifests", "write_part_records"]

Entry = dict[str, Any]


@dataclass
class Family:
    """What the manifest of one family needs from the command: its ``params`` and, for each
    folder, its sections (tokens: the packing counts; Parquet: the distinct schemas) from the
    folder's merged entries (``sections(folder, entries, old sections)`` returns the entries
    to write, possibly rewritten, and the sections)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    sections: (
        Callable[[str, list[Entry], dict[str, Any]], tuple[list[Entry], dict[str, Any]]] | None
    ) = None

    def finish(
        self, folder: str, entries: list[Entry], old: dict[str, Any]
    ) -> tuple[list[Entry], dict[str, Any]]:
        if self.sections is None:
            return entries, {}
        return self.sections(folder, entries, old)


def check_part(text: str) -> tuple[int, int]:
    """``--part I/N`` as ``(I, N)``, with ``0 <= I < N``."""
    head, slash, tail = text.partition("/")
    try:
        i, n = int(head), int(tail)
    except ValueError:
        i, n = -1, 0
    if not slash or n < 1 or not 0 <= i < n:
        raise ValueError(
            f"--part must be I/N with 0 <= I < N (this process's part of N), e.g. --part 0/4, "
            f"--part $RANK/$WORLD_SIZE or --part $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT; "
            f"got {text!r}"
        )
    return i, n


def by_folder(urls: Iterable[str], entries: Iterable[Entry | None]) -> dict[str, list[Entry]]:
    """The entries of files that have a folder, grouped by it (every folder of ``urls``, even
    one none of ``entries`` falls in: a part must record that it has nothing there)."""
    out: dict[str, list[Entry]] = {}
    for url, entry in zip(urls, entries, strict=True):
        folder = _manifest.folder_of(url)
        if folder is None:
            continue
        group = out.setdefault(folder, [])
        if entry is not None:
            group.append(entry)
    return out


def _existing(folder: str, family: str, stores: Any, index_dir: str | None) -> Any:
    try:
        return _manifest.read(folder, family, stores=stores, index_dir=index_dir)
    except ValueError:
        return None  # unreadable, or of a newer version: written anew from the indexes


def write_manifests(
    groups: Mapping[str, list[Entry]],
    family: Family,
    *,
    stores: Any,
    index_dir: str | None,
    part_files: int = _manifest.PART_FILES,
) -> list[tuple[str, int]]:
    """Write each folder's manifest: its old entries merged with ``groups[folder]``. Returns
    ``(url, files)`` of each manifest written."""
    written = []
    for folder, new in groups.items():
        old = _existing(folder, family.name, stores, index_dir)
        entries = _manifest.merge(old, new)
        entries, sections = family.finish(folder, entries, {} if old is None else old.sections)
        url = _manifest.write(
            folder, family.name, entries, family.params, stores=stores, index_dir=index_dir,
            part_files=part_files, sections=sections,
        )  # fmt: skip
        written.append((url, len(entries)))
    return written


def write_part_records(
    groups: Mapping[str, list[Entry]],
    family: Family,
    part: tuple[int, int],
    *,
    stores: Any,
    index_dir: str | None,
) -> None:
    """Record, for every folder, the entries part ``part`` indexed there."""
    i, n = part
    for folder, entries in groups.items():
        url = _manifest.part_record_url(folder, family.name, index_dir, i, n)
        _manifest.write_part_record(url, entries, family.params, stores)


def merge_parts(
    folders: Iterable[str],
    family: Family,
    n: int,
    *,
    stores: Any,
    index_dir: str | None,
    required: bool = False,
) -> tuple[list[tuple[str, int]], list[str]]:
    """For each folder whose ``n`` part records are all there, write its manifest from them
    (merged with its old one) and remove them. Returns the manifests written and the records
    still missing (``required``: a ``ValueError`` naming them instead)."""
    written: list[tuple[str, int]] = []
    missing: list[str] = []
    for folder in folders:
        urls = [_manifest.part_record_url(folder, family.name, index_dir, i, n) for i in range(n)]
        records = [_manifest.read_part_record(url, stores) for url in urls]
        absent = [url for url, r in zip(urls, records, strict=True) if r is None]
        if absent:
            missing += absent
            continue
        for url, record in zip(urls, records, strict=True):
            assert record is not None
            if record.get("params", {}) != family.params:
                raise ValueError(
                    f"{url}: this part was indexed with {record.get('params')}, but this run "
                    f"with {family.params}; run every part with the same options"
                )
        entries = [e for r in records if r is not None for e in r["entries"]]
        written += write_manifests({folder: entries}, family, stores=stores, index_dir=index_dir)
        for url in urls:
            _manifest.remove(url, stores)
    if required and missing:
        raise ValueError(
            f"--merge: {len(missing)} part records are not there yet ({missing[0]}, ...); "
            "run every part (--part I/N for each I < N) to its end first, with the same files "
            "and options"
        )
    return written, missing


def entries_in_processes(
    fn: Callable[[str], Entry],
    urls: Sequence[str],
    jobs: int,
    progress: Callable[[Iterator[Entry], int], Iterable[Entry]] | None,
) -> list[Entry]:
    """``fn(url)`` for every url, in ``jobs`` processes (one: here; remote files: many
    requests at once in threads), in order, through ``progress``."""
    from seekdata.sources import remote

    pool = _processes.pool(jobs) if jobs > 1 else None
    try:
        if pool is None and any(map(remote.is_remote, urls)):
            results: Iterator[Entry] = iter(remote.map_objects(fn, urls, urls))
        else:
            chunk = max(1, len(urls) // (8 * jobs))
            results = pool.map(fn, urls, chunksize=chunk) if pool else map(fn, urls)
        return list(progress(results, len(urls)) if progress else results)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def partial(fn: Callable[..., Entry], **kwargs: Any) -> Callable[[str], Entry]:
    """``fn`` with ``kwargs`` bound, picklable into worker processes."""
    return functools.partial(fn, **kwargs)
