"""Servers that lie, and errors that must point to the right fix (issue 35, sections 1 and 4).

A server of the suite's own (seekdata/_servers/lying_server.py, a real process on 127.0.0.1)
answers another range than the one asked for, an HTML page with status 200, no ``ETag`` (only
``Last-Modified``, or nothing), ignores ``Range``, or sends its body slowly. Each is read the
way a user reads: ``TokenWindows``, ``PackedDocuments``, ``ParquetRows`` over ``http://`` URLs,
through seekdata's loader. A lie is refused — no wrong byte reaches a batch, and the loader's
state is what it was before the batch — and a failure that no retry mends fails at once, with
the fix in its message.
"""

from __future__ import annotations

import os
import pathlib
import threading
import warnings
from typing import Any

import numpy as np
import pytest

import seekdata
from seekdata import _servers
from seekdata.sources.remote import Memory
from tests.helpers import remote_corpus as corpus


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("lying")
    for kind in ("windows", "parquet"):
        corpus.write(kind, root / kind)
    return root


@pytest.fixture(scope="module")
def liar(served: pathlib.Path) -> Any:
    with _servers.lying_server(served) as server:
        yield server


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's reads start from an empty memory (it is one per process)."""
    from seekdata.sources.remote import file as _file

    monkeypatch.setattr(_file, "_memory", Memory())
    monkeypatch.setattr(_file, "_batches", threading.local())


def windows(liar: Any, mode: str) -> Any:
    return corpus.dataset("windows", corpus.pattern("windows", f"{liar.mode(mode)}/windows"))


def loader(ds: Any, batch_size: int = 8) -> seekdata.StatefulDataLoader:
    sampler = seekdata.DistributedSampler(ds, 1, 0, seed=corpus.SEED)
    return seekdata.StatefulDataLoader(ds, batch_size=batch_size, sampler=sampler, seed=1)


def local_windows(served: pathlib.Path) -> Any:
    return corpus.dataset("windows", corpus.pattern("windows", str(served / "windows")))


def assert_resumes(state: dict[str, Any], local: Any, batch_size: int = 8) -> None:
    """``state``, saved before the refused batch, resumes over the same data (here local) to
    that batch: the refusal lost nothing. (The loader counts a batch whose fetch raised as
    handed out, as torch does: the state after the error is the next batch's.)"""
    whole = list(loader(local, batch_size))
    resumed = loader(local, batch_size)
    resumed.load_state_dict(state)
    step = state.get("step", 0)
    got, want = next(iter(resumed)), whole[step]
    assert all(np.array_equal(got[k], want[k]) for k in want)


# -- section 1: silent wrong data ------------------------------------------------------------


def test_an_honest_server_gives_the_local_stream(liar: Any, served: pathlib.Path) -> None:
    """The server's honest mode reads right (the lies below are its only difference)."""
    a = next(iter(loader(local_windows(served))))
    b = next(iter(loader(windows(liar, "honest"))))
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_a_206_for_another_range_is_refused_and_nothing_is_lost(
    liar: Any, served: pathlib.Path
) -> None:
    ds = windows(liar, "shift")
    it_loader = loader(ds)
    before = it_loader.state_dict()
    with pytest.raises(ValueError) as err:
        next(iter(it_loader))
    message = str(err.value)
    assert message.startswith(liar.mode("shift") + "/windows/tok-"), message
    assert "asked for bytes" in message and "another range" in message
    assert "honours Range" in message
    assert_resumes(before, local_windows(served))


def test_a_whole_200_html_page_is_never_served_as_tokens(liar: Any) -> None:
    from seekdata.tokens import TokenWindows

    url = f"{liar.mode('html')}/windows/tok-0.bin"
    with warnings.catch_warnings(record=True):  # (no version: warned, tested below)
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=r"seekdata-manifest-tokens\.json: it is not a"):
            TokenWindows(url, 8, eos_id=corpus.EOS)  # the page answers the manifest's URL too
        ds = TokenWindows(url, 8, eos_id=corpus.EOS, manifest=False)
    whole = loader(ds, batch_size=len(ds))  # one batch: a range that spans the whole "file"
    before = whole.state_dict()
    liar.reset()
    with pytest.raises(ValueError, match=r"HTML page.*honours Range") as err:
        next(iter(whole))
    assert str(err.value).startswith(url)
    assert liar.counts() == {"html": 1}  # refused at once, never retried
    assert before["step"] == 0


def test_last_modified_is_the_version_when_the_server_sends_no_etag(
    liar: Any, served: pathlib.Path
) -> None:
    from seekdata.tokens import TokenWindows

    path = served / "windows" / "tok-1.bin"
    kept = path.read_bytes()
    url = f"{liar.mode('lastmod')}/windows/tok-1.bin"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a Last-Modified date is a version: no warning
            ds = TokenWindows(url, 8, eos_id=corpus.EOS)
        it_loader = loader(ds, batch_size=2)
        it = iter(it_loader)
        next(it)
        before = it_loader.state_dict()
        path.write_bytes(kept[::-1])  # the same size, other tokens, a later date
        st = path.stat()
        os.utime(path, (st.st_atime + 10, st.st_mtime + 10))
        fresh_memory_now()
        with pytest.raises(ValueError, match=r"changed after its index was built") as err:
            next(it)
        assert str(err.value).startswith(url) and "Last-Modified" in str(err.value)
    finally:
        path.write_bytes(kept)
    assert_resumes(before, TokenWindows(str(path), 8, eos_id=corpus.EOS), batch_size=2)


def fresh_memory_now() -> None:
    from seekdata.sources.remote import file as _file

    _file._memory = Memory()  # (the autouse fixture puts the test's own back afterwards)


def test_a_server_that_sends_no_version_at_all_is_warned_about_at_build(liar: Any) -> None:
    from seekdata.tokens import TokenWindows

    url = f"{liar.mode('bare')}/windows/tok-2.bin"
    with pytest.warns(UserWarning, match=r"neither an ETag nor a Last-Modified") as seen:
        TokenWindows(url, 8, eos_id=corpus.EOS)
    assert any(str(w.message).startswith(url) for w in seen)


# -- section 4: errors that point to the right fix -------------------------------------------


def test_a_server_that_ignores_range_is_refused_at_once(liar: Any, tmp_path: pathlib.Path) -> None:
    from seekdata.parquet import ParquetRows

    url = f"{liar.mode('norange')}/parquet/rows-00002-of-00003.parquet"
    liar.reset()
    with pytest.raises(ValueError, match=r"answered 200 with all \d+ bytes.*honours Range") as err:
        ParquetRows(url, index_dir=tmp_path)
    assert str(err.value).startswith(url)
    assert liar.counts() == {"norange": 1}  # one request: not the whole file 8 times


def test_a_slow_body_is_given_up_after_the_deadline_of_one_read(
    liar: Any, served: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seekdata.sources.remote import faults, stores
    from seekdata.tokens import TokenWindows

    ds = TokenWindows(f"{liar.mode('slow')}/windows/tok-0.bin", 8, eos_id=corpus.EOS)
    # small bounds for the test (300 s a read, 120 s a request otherwise); raising=False: the
    # deadline is new, and this test is to fail without it
    monkeypatch.setattr(faults, "DEADLINE_S", 1.5, raising=False)
    monkeypatch.setattr(stores, "TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(stores, "_TIMEOUT_S", 0.5, raising=False)
    it_loader = loader(ds)
    before = it_loader.state_dict()
    liar.reset()
    with pytest.raises(OSError, match=r"within 1\.5 s, the most one read may take") as err:
        next(iter(it_loader))
    assert str(err.value).startswith(liar.mode("slow"))
    # a request takes at least 0.5 s, so at most 4 fit in 1.5 s (8 without the deadline)
    assert liar.counts()["slow"] <= 4
    local = TokenWindows(str(served / "windows" / "tok-0.bin"), 8, eos_id=corpus.EOS)
    assert_resumes(before, local)


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_a_refused_connection_fails_after_three_attempts(kind: str) -> None:
    from seekdata.tokens import TokenWindows

    port = _servers.free_port()  # nothing listens there
    if kind == "http":
        url, options = f"http://127.0.0.1:{port}/tok.bin", None
    else:
        url = "s3://bucket/tok.bin"
        options = {
            "key": _servers.S3_KEY,
            "secret": _servers.S3_SECRET,
            "endpoint_url": f"http://127.0.0.1:{port}",
            "client_kwargs": {"region_name": _servers.S3_REGION},
        }  # botocore's own retries left at their default: seekdata turns them off
    with pytest.raises(OSError, match=r"connection was refused 3 times in a row") as err:
        TokenWindows(url, 8, eos_id=0, storage_options=options)  # the folder's manifest, first
    assert str(err.value).startswith(url.replace("tok.bin", "seekdata-manifest-tokens.json"))
    with pytest.raises(OSError, match=r"connection was refused 3 times in a row") as err:
        TokenWindows(url, 8, eos_id=0, storage_options=options, manifest=False)
    assert str(err.value).startswith(url) and "check the endpoint and its port" in str(err.value)


def test_missing_credentials_are_permanent_and_named(
    s3_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    from seekdata.tokens import TokenWindows

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    nowhere = str(tmp_path / "none")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", nowhere)
    monkeypatch.setenv("AWS_CONFIG_FILE", nowhere)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no request beyond 127.0.0.1
    options = {"endpoint_url": s3_server.url, "client_kwargs": {"region_name": "us-east-1"}}
    with pytest.raises(ValueError, match=r"manifest-tokens\.json: no credentials were found"):
        TokenWindows("s3://bucket/tok.bin", 8, eos_id=0, storage_options=options)
    with pytest.raises(ValueError, match=r"no credentials were found") as err:
        TokenWindows("s3://bucket/tok.bin", 8, eos_id=0, storage_options=options, manifest=False)
    message = str(err.value)
    assert message.startswith("s3://bucket/tok.bin") and "storage_options=" in message
    assert "AWS_ACCESS_KEY_ID" in message and "attempts" not in message


def test_an_unknown_storage_options_key_is_refused_naming_the_keys(s3_proxy: Any) -> None:
    from seekdata.tokens import TokenWindows

    options = {**_servers.s3_options(s3_proxy), "endpoint": s3_proxy.url}  # endpoint_url's
    s3_proxy.reset()
    with pytest.raises(ValueError, match=r"does not take: 'endpoint'; it takes .*endpoint_url"):
        TokenWindows("s3://bucket/tok.bin", 8, eos_id=0, storage_options=options)
    assert s3_proxy.stats()["requests"] == 0


@pytest.mark.parametrize("url", ["s3://corpus", "s3://corpus/"])
def test_a_bucket_without_a_key_is_refused_before_any_request(s3_proxy: Any, url: str) -> None:
    from seekdata.wds import TarShards

    s3_proxy.reset()
    with pytest.raises(ValueError, match=r"must name a bucket and an object in it") as err:
        TarShards(url, storage_options=_servers.s3_options(s3_proxy))
    assert str(err.value).startswith(url + ": ")  # not s3://corpus.seekdata-index.json
    assert "only the bucket 'corpus'" in str(err.value)
    assert s3_proxy.stats()["requests"] == 0


def test_a_weak_etag_reads_as_an_etag_and_a_change_is_refused(
    liar: Any, served: pathlib.Path
) -> None:
    """A weak ``ETag`` (``W/"..."``) never matches ``If-Match``, so a read that sent it would be
    refused every time; it is compared with the answer's instead, and still tells versions
    apart."""
    from seekdata.tokens import TokenWindows

    path = served / "windows" / "tok-2.bin"
    kept = path.read_bytes()
    url = f"{liar.mode('weak')}/windows/tok-2.bin"
    local = TokenWindows(str(path), 8, eos_id=corpus.EOS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a weak ETag is a version: no warning
            ds = TokenWindows(url, 8, eos_id=corpus.EOS)
        assert len(ds) == len(local)
        for i in range(len(ds)):
            np.testing.assert_array_equal(ds[i]["input_ids"], local[i]["input_ids"])
        it_loader = loader(ds, batch_size=2)
        it = iter(it_loader)
        next(it)
        before = it_loader.state_dict()
        path.write_bytes(kept[::-1])  # the same size, other tokens, another mtime: another tag
        st = path.stat()
        os.utime(path, (st.st_atime + 10, st.st_mtime + 10))
        fresh_memory_now()
        with pytest.raises(ValueError, match=r"changed after its index was built") as err:
            next(it)
        assert str(err.value).startswith(url) and 'W/"' in str(err.value)
    finally:
        path.write_bytes(kept)
    assert_resumes(before, TokenWindows(str(path), 8, eos_id=corpus.EOS), batch_size=2)
