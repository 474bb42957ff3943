"""PackedDocuments checks where each document starts, before any sequence holding it is served.

The document index is trusted when its stamp matches, and its digest only proves it is the
index someone wrote. An index edited with its digest recomputed (or a file rewritten with its
old size and mtime) can carry an extra boundary inside a document: the piece after it ends with
eos_id and holds none before, so the checks of a document's end let it through. The token
before each document's start must be eos_id (or the start of a file): checked at every read of
the document, one token more (tests/sources/tokens/test_tokens.py: the other index checks).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest

from seekdata.sources.tokens import index as _index
from seekdata.tokens import PackedDocuments
from seekdata.tools.cli import main

SEQ_LEN, EOS = 16, 0


def write_corpus(path: pathlib.Path, lengths: list[int], tail: int = 0) -> np.ndarray:
    """Documents of ``lengths`` (each ending with EOS), then ``tail`` tokens without one."""
    gen = np.random.default_rng(3)
    docs = [np.append(gen.integers(1, 1000, n - 1), EOS) for n in lengths]
    docs.append(gen.integers(1, 1000, tail))
    tokens = np.concatenate(docs).astype(np.uint16)
    tokens.tofile(path)
    return tokens


def add_boundary(path: pathlib.Path, at: int) -> None:
    """Put an extra document end at token ``at`` of the file's index, its digest recomputed."""
    ipath = str(path) + _index.INDEX_SUFFIX
    old = _index._read(ipath, np.dtype(np.uint16), EOS)
    assert old is not None and at not in old.ends
    ends = np.sort(np.append(old.ends, at))
    _index._write(ipath, dataclasses.replace(old, ends=ends), str(path))


def served_right(segment: tuple[int, int, int], true: np.ndarray, edited: np.ndarray) -> bool:
    """Whether ``segment`` (document, start, stop) of the edited dataset is a true piece of
    the true document it lies in: the same start, and the same end if it ends the document."""
    doc, start, stop = segment
    t = int(np.searchsorted(true, start, side="right")) - 1
    whole, end = stop == edited[doc + 1], true[t + 1]
    return bool(edited[doc] == true[t] and stop <= end and (not whole or stop == end))


def all_bounds(ds: PackedDocuments) -> np.ndarray:
    """Every document boundary of ``ds``, from its files' indexes (read lazily)."""
    return ds._documents.bounds(0, ds.num_documents)


LENGTHS = [5, 9, 12, 7, 3, 20, 11, 14, 6, 4, 8, 90, 10, 5, 13, 6, 15, 2, 9, 7]


@pytest.mark.parametrize(
    ("doc", "back"),
    [(2, 3), (11, 3), (11, 50)],
    ids=["3-before-a-short-documents-end", "3-before-a-long-documents-end", "inside-a-long-one"],
)
def test_a_boundary_added_inside_a_document_is_refused_before_any_sequence_holding_it(
    tmp_path: pathlib.Path, doc: int, back: int
) -> None:
    path = tmp_path / "tok.bin"
    write_corpus(path, LENGTHS)
    ds = PackedDocuments(str(path), SEQ_LEN, eos_id=EOS)  # the index is built
    true = all_bounds(ds).copy()
    add_boundary(path, int(true[doc + 1]) - back)
    edited = PackedDocuments(str(path), SEQ_LEN, eos_id=EOS)  # its stamp matches: trusted
    assert edited.num_documents == ds.num_documents + 1
    wrong, edited_bounds = [], all_bounds(edited)
    for i in range(len(edited)):
        segments = edited.locate(i)
        if all(served_right(s, true, edited_bounds) for s in segments):
            edited[i]  # a sequence of true documents is read as before
            continue
        wrong.append(i)
        with pytest.raises(
            ValueError,
            match=r"token file .*tok\.bin: its document index (starts|ends) document \d+ at token "
            r"\d+, but the token before it is not eos_id 0.*`seekdata index --eos-id 0 "
            r"'.*tok\.bin' --force`",
        ):
            edited[i]
    assert wrong, "the edit changed no sequence"
    assert main(["index", "--eos-id", str(EOS), "--force", str(path)]) == 0  # the fix named
    healed = PackedDocuments(str(path), SEQ_LEN, eos_id=EOS)
    assert healed.stream_signature == ds.stream_signature


def test_documents_that_start_a_file_or_follow_its_tail_need_no_eos_before_them(
    tmp_path: pathlib.Path,
) -> None:
    """A file's first document has no token before it in that file, and a file's tokens after
    its last eos_id are a document of their own: both read as the boundaries say."""
    a = write_corpus(tmp_path / "a.bin", [4, 30, 6], tail=5)  # ends without eos_id
    b = write_corpus(tmp_path / "b.bin", [40, 3, 7])
    files = [str(tmp_path / "a.bin"), str(tmp_path / "b.bin")]
    ds = PackedDocuments(files, SEQ_LEN, eos_id=EOS)
    ends = np.cumsum([4, 30, 6, 5, 40, 3, 7])
    given = PackedDocuments(files, SEQ_LEN, eos_id=None, document_ends=ends)  # nothing checked
    assert np.array_equal(all_bounds(ds)[1:], ends)
    assert len(ds) == len(given)
    for i in range(len(ds)):
        got, want = ds[i], given[i]
        assert all(np.array_equal(got[k], want[k]) for k in want), i
    assert len(a) + len(b) == ds.num_tokens


def test_an_index_of_deeply_nested_json_is_rebuilt(tmp_path: pathlib.Path) -> None:
    """As an index of any bytes that are not JSON: no RecursionError from the parser."""
    path = tmp_path / "tok.bin"
    write_corpus(path, LENGTHS)
    ds = PackedDocuments(str(path), SEQ_LEN, eos_id=EOS)
    ipath = pathlib.Path(str(path) + _index.INDEX_SUFFIX)
    ipath.write_bytes(b"[" * 60_000 + b"\n")  # a header line, 64 KiB at most
    again = PackedDocuments(str(path), SEQ_LEN, eos_id=EOS)
    assert again.stream_signature == ds.stream_signature
    assert ipath.read_bytes().startswith(b'{"format":"seekdata-token-docs"')
