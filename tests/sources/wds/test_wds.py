"""TarShards: random access to webdataset shards equals webdataset's own stream."""

from __future__ import annotations

import gc
import io
import json
import os
import pathlib
import pickle
import random
import tarfile
import warnings
from typing import Any

import numpy as np
import pytest
import torch
import webdataset as wds

import seekdata.sources.wds.tarindex as tarindex
from seekdata.sources.wds import shards as _shards  # _pread is patched where TarShards reads
from seekdata.wds import TarShards
from tests.helpers.shards import N_SHARDS, PER_SHARD, write_shards


def write_tar(path: pathlib.Path, members: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def webdataset_samples(urls: Any, *decode: Any) -> list[dict[str, Any]]:
    """What webdataset itself yields, in order."""
    with warnings.catch_warnings():
        # webdataset 1.0.2 never closes the shard files it opens; not ours to fix
        warnings.simplefilter("ignore", ResourceWarning)
        pipeline = wds.WebDataset(urls, shardshuffle=False)
        if decode:
            pipeline = pipeline.decode(*decode)
        samples = list(pipeline)
        del pipeline
        gc.collect()
    return samples


@pytest.fixture
def shards(tmp_path: pathlib.Path) -> str:
    return write_shards(tmp_path)


# -- random access equals webdataset ----------------------------------------------


def test_every_sample_equals_webdatasets_stream(shards: str) -> None:
    ds = TarShards(shards)
    ref = webdataset_samples(shards)
    assert len(ds) == len(ref) == N_SHARDS * PER_SHARD
    order = list(range(len(ds)))
    random.Random(1).shuffle(order)
    for i in order:  # random access, across shards
        assert ds[i] == ref[i]
    assert [s["__key__"] for s in ref] == [ds.key_of(i) for i in range(len(ds))]
    assert ds[-1] == ref[-1]


def test_shard_layout(tmp_path: pathlib.Path) -> None:
    pattern = write_shards(tmp_path, n=47, per_shard=10)  # 10, 10, 10, 10, 7
    ds = TarShards(pattern)
    assert ds.shard_sizes == [10, 10, 10, 10, 7]
    assert ds.shard_starts == [0, 10, 20, 30, 40]
    assert [ds.shard_of(i) for i in (0, 9, 10, 39, 40, 46)] == [0, 0, 1, 3, 4, 4]
    assert ds.urls == [str(tmp_path / f"shard-{s:03d}.tar") for s in range(5)]
    assert all(ds[i]["__url__"] == ds.urls[ds.shard_of(i)] for i in range(len(ds)))


def test_list_of_paths_and_pathlike(shards: str, tmp_path: pathlib.Path) -> None:
    paths = sorted(tmp_path.glob("shard-*.tar"))
    assert len(TarShards(paths)) == len(TarShards(shards)) == N_SHARDS * PER_SHARD
    assert len(TarShards(paths[0])) == PER_SHARD


def test_grouping_follows_webdataset(tmp_path: pathlib.Path) -> None:
    """Directories in keys, multi-dot and upper-case extensions, metadata, odd members."""
    a = write_tar(
        tmp_path / "a.tar",
        [
            ("__meta__", b"skipped"),
            ("d/x.seg.PNG", b"1"),
            ("d/x.json", b"{}"),
            ("noextension", b"skipped: no dot"),
            ("d/y.txt", b"y"),
            ("__dir__/z.txt", b"skipped"),
            ("x.txt", b"other key than d/x"),
            ("d/x.txt", b"d/x again, later: a new sample, as webdataset does"),
        ],
    )
    b = write_tar(tmp_path / "b.tar", [("q.r.s.t", b"multi")])
    ds = TarShards([a, b])
    ref = webdataset_samples([a, b])
    assert [ds[i] for i in range(len(ds))] == ref
    assert [s["__key__"] for s in ref] == ["d/x", "d/y", "x", "d/x", "q"]
    assert ds[0]["seg.png"] == b"1"


def record_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every (offset, size) TarShards reads from a shard, in order."""
    reads: list[tuple[int, int]] = []
    pread = _shards._pread

    def recording(fd: int, size: int, offset: int) -> bytes:
        reads.append((offset, size))
        return pread(fd, size, offset)

    monkeypatch.setattr(_shards, "_pread", recording)
    return reads


def test_reads_exactly_the_members_bytes(shards: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = TarShards(shards)
    reads = record_reads(monkeypatch)
    sample = ds[57]
    with tarfile.open(ds.urls[2]) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(sample["__key__"] + ".")]
    # each small member with the 512-byte tar header before it (checked against the index)
    assert reads == [(m.offset_data - 512, 512 + m.size) for m in members]
    assert len(reads) == 3  # bin, cls, txt: nothing else read


def test_a_large_member_is_read_after_its_header(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = bytes(range(256)) * (_shards._JOINED_READ // 256 + 1)
    ds = TarShards(write_tar(tmp_path / "big.tar", [("a.bin", big), ("a.txt", b"x")]))
    reads = record_reads(monkeypatch)
    assert ds[0]["bin"] == big and ds[0]["txt"] == b"x"
    assert reads[:3] == [(0, 512), (512, len(big)), (len(big) + 512 + 512 - len(big) % 512, 513)]


# -- decoding -----------------------------------------------------------------------


def image(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, (6, 5, 3), dtype=np.uint8)


def test_decode_matches_webdataset(tmp_path: pathlib.Path) -> None:
    pattern = write_shards(tmp_path, n=12, per_shard=5, png=image, pth=lambda i: torch.arange(i))
    for spec in ("rgb", "torch", "l8"):
        ds = TarShards(pattern, decode=spec)
        ref = webdataset_samples(pattern, spec)
        assert len(ds) == len(ref) == 12
        for i, expected in enumerate(ref):
            got = ds[i]
            assert got.keys() == expected.keys()
            for key, value in expected.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(got[key], value)
                elif isinstance(value, np.ndarray):
                    np.testing.assert_array_equal(got[key], value)
                else:
                    assert got[key] == value
    sample = TarShards(pattern, decode="torchrgb8")[3]
    assert torch.equal(sample["png"], torch.from_numpy(image(3)).permute(2, 0, 1))
    assert torch.equal(sample["pth"], torch.arange(3))
    assert (sample["cls"], sample["txt"]) == (3, "sample 3")


def test_decode_handlers_lists_and_decoders(shards: str) -> None:
    def upper(key: str, data: bytes) -> Any:
        return data.decode().upper() if key.endswith(".txt") else None

    assert TarShards(shards, decode=upper)[1]["txt"] == "SAMPLE 1"
    assert TarShards(shards, decode=[upper, "rgb"])[1]["cls"] == 1
    only_txt = wds.autodecode.Decoder([upper], only=["txt"])
    sample = TarShards(shards, decode=only_txt)[2]
    assert (sample["txt"], sample["cls"]) == ("SAMPLE 2", b"2")


@pytest.mark.parametrize(
    ("decode", "error", "match"),
    [
        ("rgbx", ValueError, "not a webdataset image spec"),
        (5, TypeError, "decode must be"),
        ([3], TypeError, "decode entries"),
    ],
)
def test_bad_decode_arguments(shards: str, decode: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        TarShards(shards, decode=decode)


def test_decode_error_names_member_and_shard(tmp_path: pathlib.Path) -> None:
    shard = write_tar(tmp_path / "bad.tar", [("k.png", b"not a png")])
    with pytest.raises(ValueError, match=r"member k\.png of sample 0 in shard .*bad\.tar"):
        TarShards(shard, decode="rgb")[0]


class Opaque:
    """Not loadable with torch.load(weights_only=True)."""

    def __init__(self, value: int) -> None:
        self.value = value


def test_pickles_need_allow_pickle(tmp_path: pathlib.Path) -> None:
    pattern = write_shards(tmp_path, n=4, per_shard=4, pyd=lambda i: {"i": i})
    raw = TarShards(pattern)[1]  # bytes are never unpickled
    assert pickle.loads(raw["pyd"]) == {"i": 1}
    with pytest.raises(
        ValueError, match=r"s00001\.pyd in shard .*shard-000\.tar.*allow_pickle=True"
    ):
        TarShards(pattern, decode="rgb")[1]
    assert TarShards(pattern, decode="rgb", allow_pickle=True)[1]["pyd"] == {"i": 1}
    with pytest.raises(ValueError, match="allow_pickle"):  # basichandlers itself is swapped too
        TarShards(pattern, decode=[wds.autodecode.basichandlers])[0]


def test_pth_loads_weights_only_unless_allow_pickle(tmp_path: pathlib.Path) -> None:
    buffer = io.BytesIO()
    torch.save(Opaque(7), buffer)
    shard = write_tar(tmp_path / "o.tar", [("k.pth", buffer.getvalue())])
    with pytest.raises(ValueError, match=r"k\.pth .*weights_only.*allow_pickle=True"):
        TarShards(shard, decode="rgb")[0]
    assert TarShards(shard, decode="rgb", allow_pickle=True)[0]["pth"].value == 7


# -- URLs ---------------------------------------------------------------------------


def test_pipe_urls_need_allow_pipe_and_index_dir(shards: str, tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "shard-001.tar")
    url = f"pipe:cat '{path}'"
    with pytest.raises(ValueError, match=r"shell command.*allow_pipe=True"):
        TarShards(url)
    with pytest.raises(ValueError, match=r"cannot seek.*index_dir"):
        TarShards(url, allow_pipe=True)
    piped = TarShards(url, allow_pipe=True, index_dir=tmp_path / "cache")
    local = TarShards(path)
    for i in range(PER_SHARD):
        expected = dict(local[i], __url__=url)
        del expected["__local_path__"]  # as webdataset: pipes have no local path
        assert piped[i] == expected
    with pytest.raises(ValueError, match="exited with status"):
        TarShards("pipe:exit 3", allow_pipe=True, index_dir=tmp_path / "cache")


def test_unknown_url_schemes_are_refused(shards: str) -> None:
    # s3://, https://, ... are read by range (tests/test_remote_*.py); others are refused
    with pytest.raises(ValueError, match=r"remote URLs \(.*s3://.*\), not 'ftp' URLs"):
        TarShards("ftp://example.com/shard-{000..001}.tar")


def test_relative_paths_survive_a_chdir(
    shards: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ds = TarShards("shard-{000..004}.tar")
    monkeypatch.chdir(tmp_path.parent)
    assert ds[25]["__key__"] == "s00025"
    assert ds[25]["__local_path__"] == "shard-001.tar"  # as given, like webdataset


def test_file_urls(shards: str, tmp_path: pathlib.Path) -> None:
    url = "file://" + str(tmp_path / "shard-{000..004}.tar")
    assert [TarShards(url)[i] for i in range(5)] == webdataset_samples(url)[:5]


# -- the index ----------------------------------------------------------------------


def test_index_is_built_once_and_reused(
    shards: str, tmp_path: pathlib.Path, scans: list[str]
) -> None:
    TarShards(shards)
    assert len(scans) == N_SHARDS
    assert all(os.path.exists(f"{u}{tarindex.INDEX_SUFFIX}") for u in TarShards(shards).urls)
    assert len(scans) == N_SHARDS  # the second open read the indexes only
    assert TarShards(shards)[33] == webdataset_samples(shards)[33]


def test_index_dir(shards: str, tmp_path: pathlib.Path, scans: list[str]) -> None:
    index_dir = tmp_path / "indexes"
    ds = TarShards(shards, index_dir=index_dir)
    TarShards(shards, index_dir=str(index_dir))
    assert len(scans) == N_SHARDS
    assert len(list(index_dir.iterdir())) == N_SHARDS
    assert not list(tmp_path.glob(f"*{tarindex.INDEX_SUFFIX}"))
    assert ds[5] == webdataset_samples(shards)[5]


def test_same_basename_in_two_directories_share_an_index_dir(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_shards(tmp_path / "a", n=3, per_shard=3)
    b = write_shards(tmp_path / "b", n=5, per_shard=5)
    index_dir = tmp_path / "indexes"
    assert (len(TarShards(a, index_dir=index_dir)), len(TarShards(b, index_dir=index_dir))) == (
        3,
        5,
    )


def test_unreadable_index_is_rebuilt(shards: str, scans: list[str]) -> None:
    ds = TarShards(shards)
    pathlib.Path(ds.urls[1] + tarindex.INDEX_SUFFIX).write_text("{not json")
    pathlib.Path(ds.urls[2] + tarindex.INDEX_SUFFIX).write_text('{"format": "other"}')
    assert [TarShards(shards)[i] for i in range(len(ds))] == webdataset_samples(shards)
    assert scans[N_SHARDS:] == ds.urls[1:3]


def test_touched_shard_is_rescanned_and_kept(shards: str, scans: list[str]) -> None:
    ds = TarShards(shards)
    st = os.stat(ds.urls[3])
    os.utime(ds.urls[3], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a copy, a touch
    assert len(TarShards(shards)) == len(ds)
    assert scans[N_SHARDS:] == [ds.urls[3]]
    TarShards(shards)
    assert scans[N_SHARDS:] == [ds.urls[3]]  # the stamp was refreshed


def rewrite_shard(url: str, n: int) -> None:
    st = os.stat(url)
    with wds.TarWriter(url) as w:
        for i in range(n):
            w.write({"__key__": f"new{i}", "txt": "x" * i})
    os.utime(url, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_changed_shard_is_an_error_unless_rebuilt(shards: str, scans: list[str]) -> None:
    ds = TarShards(shards)
    rewrite_shard(ds.urls[2], 30)
    with pytest.raises(ValueError, match=r"shard .*shard-002\.tar changed since .*--force"):
        TarShards(shards)
    rebuilt = TarShards(shards, rebuild_index=True)
    assert rebuilt.shard_sizes == [20, 20, 30, 20, 20]
    assert scans[N_SHARDS:] == [ds.urls[2]]  # only the changed shard was rescanned
    assert TarShards(shards).shard_sizes == [20, 20, 30, 20, 20]
    keys = [rebuilt[i]["__key__"] for i in (39, 40, 69, 70)]
    assert keys == ["s00039", "new0", "new29", "s00060"]


def test_same_size_new_layout_is_an_error(tmp_path: pathlib.Path) -> None:
    shard = write_tar(tmp_path / "x.tar", [("a.txt", b"1"), ("b.txt", b"2")])
    TarShards(shard)
    st = os.stat(shard)
    write_tar(tmp_path / "x.tar", [("a.txt", b"1"), ("c.txt", b"2")])
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert os.stat(shard).st_size == st.st_size
    with pytest.raises(ValueError, match="changed since its index was built"):
        TarShards(shard)


def test_shard_changed_under_an_open_dataset(shards: str) -> None:
    ds = TarShards(shards)
    ds[0]
    rewrite_shard(ds.urls[4], 3)
    assert ds[1]["__key__"] == "s00001"  # shard 0 is unchanged
    with pytest.raises(ValueError, match=r"shard-004\.tar changed after this dataset indexed it"):
        ds[90]


# -- bad input ----------------------------------------------------------------------


def test_missing_shard(shards: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match=r"shard .*shard-005\.tar does not exist"):
        TarShards(str(tmp_path / "shard-{000..005}.tar"))
    with pytest.raises(ValueError, match="globs are not expanded"):
        TarShards(str(tmp_path / "shard-*.tar"))
    with pytest.raises(ValueError, match="expected a tar file"):
        TarShards(str(tmp_path))


def end_of_members(path: str) -> int:
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    return last.offset_data + -(-last.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


@pytest.mark.parametrize("cut", ["half", "end marker", "first header"])
def test_truncated_shard(shards: str, tmp_path: pathlib.Path, cut: str) -> None:
    path = tmp_path / "shard-003.tar"
    size = {
        "half": path.stat().st_size // 2,
        "end marker": end_of_members(str(path)),
        "first header": 100,
    }
    with open(path, "r+b") as f:
        f.truncate(size[cut])
    with pytest.raises(
        ValueError, match=r"shard .*shard-003\.tar is (truncated|not a readable tar)"
    ):
        TarShards(shards)


def test_compressed_shard(tmp_path: pathlib.Path) -> None:
    with wds.ShardWriter(str(tmp_path / "z-%d.tar.gz"), verbose=0) as w:
        w.write({"__key__": "a", "txt": "x"})
    with pytest.raises(
        ValueError, match=r"z-0\.tar\.gz: random access needs an uncompressed tar.*gzip"
    ):
        TarShards(str(tmp_path / "z-0.tar.gz"))


def test_sample_split_across_shards(tmp_path: pathlib.Path) -> None:
    a = write_tar(tmp_path / "a.tar", [("k0.txt", b"0"), ("k1.txt", b"1")])
    b = write_tar(tmp_path / "b.tar", [("k1.json", b"{}"), ("k2.txt", b"2")])
    with pytest.raises(
        ValueError, match=r"'k1' is split across shards: it ends .*a\.tar and starts .*b\.tar"
    ):
        TarShards([a, b])
    assert len(TarShards([b, a])) == 4  # the same key apart is two samples, as in webdataset


def test_duplicate_member_in_a_sample(tmp_path: pathlib.Path) -> None:
    shard = write_tar(tmp_path / "d.tar", [("k.txt", b"0"), ("k.TXT", b"1")])
    with pytest.raises(
        ValueError, match=r"d\.tar: sample 'k' has two members with extension 'txt'"
    ):
        TarShards(shard)


@pytest.mark.parametrize(
    ("urls", "error", "match"),
    [
        ("", ValueError, "expected at least one shard"),
        ([], ValueError, "expected at least one shard"),
        (["a.tar", ""], ValueError, "expected at least one shard"),
        (7, TypeError, "expected a brace pattern"),
        ([b"a.tar"], TypeError, "every shard must be a str"),
    ],
)
def test_bad_urls(urls: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        TarShards(urls)


def test_bad_arguments_and_indices(shards: str) -> None:
    with pytest.raises(TypeError, match="allow_pickle must be a bool"):
        TarShards(shards, allow_pickle=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="index_dir must be a path"):
        TarShards(shards, index_dir=3)  # type: ignore[arg-type]
    ds = TarShards(shards)
    with pytest.raises(IndexError, match=r"in \[0, 100\), got 100"):
        ds[100]
    with pytest.raises(TypeError, match="index must be an int"):
        ds["3"]  # type: ignore[index]
    assert ds[np.int64(3)] == ds[3]


def test_empty_shards_count_zero(tmp_path: pathlib.Path) -> None:
    a = write_tar(tmp_path / "a.tar", [("k0.txt", b"0")])
    b = write_tar(tmp_path / "b.tar", [("k1.txt", b"1")])
    empty = write_tar(tmp_path / "empty.tar", [])
    ds = TarShards([empty, a, empty, b])
    assert ds.shard_sizes == [0, 1, 0, 1]
    assert [ds.shard_of(i) for i in range(2)] == [1, 3]


# -- processes ----------------------------------------------------------------------


def test_pickles_without_open_files(shards: str) -> None:
    ds = TarShards(shards, decode="rgb")
    before = [ds[i] for i in range(0, 100, 7)]  # opens files in this process
    clone = pickle.loads(pickle.dumps(ds))
    assert [clone[i] for i in range(0, 100, 7)] == before
    ds.close()
    assert ds[0] == before[0]  # reopens


def test_dataloader_workers(shards: str) -> None:
    ds = TarShards(shards, decode="rgb")
    ds[0]  # a file open in the parent: forked workers must reopen their own
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert [s["__key__"] for s in loader] == [f"s{i:05d}" for i in range(len(ds))]
    assert [s["cls"] for s in loader] == [i % 7 for i in range(len(ds))]


# -- an index that does not describe its shard ----------------------------------------------


def edit_index(url: str, edit: Any) -> None:
    """Change the index beside ``url`` in place; its stamp still matches the shard."""
    path = pathlib.Path(url + tarindex.INDEX_SUFFIX)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _swap_keys(doc: dict) -> None:
    doc["keys"][0], doc["keys"][1] = doc["keys"][1], doc["keys"][0]


def _swap_exts(doc: dict) -> None:
    doc["exts"][0], doc["exts"][1] = doc["exts"][1], doc["exts"][0]


def _shift_into_data(doc: dict) -> None:
    m = next(i for i, size in enumerate(doc["sizes"]) if size > 1024)
    doc["offsets"][m] += 512  # in range, no overlap, no gap: only the header check can tell
    doc["sizes"][m] -= 512
    headers = [[value, 1] for value, count in doc["headers"] for _ in range(count)]
    headers[m][0] += 512
    doc["headers"] = headers


@pytest.mark.parametrize("edit", [_swap_keys, _swap_exts, _shift_into_data])
def test_a_read_never_returns_another_members_bytes(shards: str, edit: Any) -> None:
    ds = TarShards(shards)
    url = ds.urls[0]
    edit_index(url, edit)
    edited = TarShards(shards)  # the stamp matches: the index is trusted, but checked
    reads = [_reads(edited, i) for i in range(PER_SHARD)]
    assert all(r is None or r == ds[i] for i, r in enumerate(reads))  # no other bytes, ever
    failing = [i for i, r in enumerate(reads) if r is None]
    assert failing, "the edit was not detected"
    with pytest.raises(
        ValueError,
        match=r"shard .*shard-000\.tar: its index places member "
        r".* but the tar header there .*--force",
    ):
        edited[failing[0]]


def _reads(ds: TarShards, i: int) -> Any:
    try:
        return ds[i]
    except ValueError:
        return None


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("offsets", -512, "an offset before the first data block"),
        ("sizes", 10**12, "data past the shard.s end"),
        ("sizes", -1, "a negative size"),
        ("offsets", 513, "an offset off a 512-byte block"),
    ],
)
def test_an_index_out_of_range_is_refused_naming_the_fix(
    shards: str, field: str, value: int, match: str
) -> None:
    ds = TarShards(shards)
    edit_index(ds.urls[1], lambda doc: doc[field].__setitem__(3, value))
    with pytest.raises(
        ValueError,
        match=rf"shard .*shard-001\.tar: its index .* \(member 3 "
        rf"has ({match})",
    ):
        TarShards(shards)
    healed = TarShards(shards, rebuild_index=True)
    assert [healed[i] for i in range(len(ds))] == [ds[i] for i in range(len(ds))]
    TarShards(shards)  # the rebuilt index is written back


def _delete_sample(i: int) -> Any:
    """Remove sample i's entry, and its members', consistently from every list of an index."""

    def edit(doc: dict) -> None:
        counts = doc["members_per_sample"]
        first, k = sum(counts[:i]), counts[i]
        for field in ("member_ext", "offsets", "sizes"):
            del doc[field][first : first + k]
        if "headers" in doc:  # runs of [value, count]
            headers = [value for value, count in doc["headers"] for _ in range(count)]
            del headers[first : first + k]
            doc["headers"] = [[value, 1] for value in headers]
        del doc["keys"][i], counts[i]

    return edit


@pytest.mark.parametrize("i", [0, 7, PER_SHARD - 1], ids=["first", "middle", "last"])
def test_an_index_with_a_sample_deleted_is_refused(shards: str, scans: list[str], i: int) -> None:
    """Else the dataset shrinks by one and every later sample is renumbered, silently."""
    ds = TarShards(shards)
    edit_index(ds.urls[1], _delete_sample(i))
    with pytest.raises(
        ValueError,
        match=rf"shard .*shard-001\.tar: its index .* cannot describe this shard \(member "
        rf"'s{PER_SHARD + i:05d}\.\w+' at byte \d+ is not listed\); .*--force",
    ):
        TarShards(shards)
    assert scans == ds.urls  # found without scanning the shard again
    healed = TarShards(shards, rebuild_index=True)
    assert [healed[j] for j in range(len(ds))] == [ds[j] for j in range(len(ds))]


def write_tar_with_skipped_members(path: pathlib.Path, fmt: int) -> str:
    """Samples d/a, d/b, d/c with what webdataset skips before, between and after them: a
    folder, a top-level ``__meta__``, a file without extension, a link, a ``__x__/`` folder."""
    long = "k" * 120 if fmt != tarfile.USTAR_FORMAT else "k"  # a long name: pax or GNU headers
    members = [
        ("d", tarfile.DIRTYPE, b""),
        ("d/a.txt", tarfile.REGTYPE, b"a"),
        ("d/a.cls", tarfile.REGTYPE, b"1"),
        ("__meta__", tarfile.REGTYPE, b"m" * 700),
        ("d/noext", tarfile.REGTYPE, b"n"),
        (f"d/{long}.txt", tarfile.REGTYPE, b"long"),
        ("d/link", tarfile.SYMTYPE, b""),
        ("d/c.txt", tarfile.REGTYPE, b"c" * 600),
        ("__x__/y.txt", tarfile.REGTYPE, b"y"),
        ("e", tarfile.DIRTYPE, b""),
    ]
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data)
            if kind == tarfile.SYMTYPE:
                info.linkname = "a.txt"
            tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_members_webdataset_skips_may_lie_around_samples(
    tmp_path: pathlib.Path, scans: list[str], fmt: int
) -> None:
    """The ranges between samples are read when the index is trusted: what webdataset skips
    is accepted there; a sample deleted from the index, next to them, is not."""
    shard = write_tar_with_skipped_members(tmp_path / "odd.tar", fmt)
    expected = webdataset_samples(shard)
    assert [s["__key__"] for s in expected] == ["d/a", "d/" + expected[1]["__key__"][2:], "d/c"]
    for _ in range(2):  # scanned, then trusted (its stamp matches) and checked
        ds = TarShards(shard)
        assert [ds[i] for i in range(len(ds))] == expected
    assert scans == [shard]
    for i in range(3):
        edit_index(shard, lambda doc: None)  # rewrite the index unchanged: still accepted
        TarShards(shard)
        saved = pathlib.Path(shard + tarindex.INDEX_SUFFIX).read_text()
        edit_index(shard, _delete_sample(i))
        with pytest.raises(ValueError, match=r"is not listed\); .*--force"):
            TarShards(shard)
        pathlib.Path(shard + tarindex.INDEX_SUFFIX).write_text(saved)
    assert scans == [shard]


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_the_header_check_accepts_long_odd_names_in_every_tar_format(
    tmp_path: pathlib.Path, fmt: int
) -> None:
    names = [
        "d" * 60 + "/" + "k" * 80 + ".txt",  # ustar splits it into prefix and name
        "short.TXT",  # the index lower-cases extensions
        "big.bin",
    ]
    if fmt != tarfile.USTAR_FORMAT:  # ustar can hold neither
        names += ["k" * 150 + ".txt", "ключ.txt"]
    path = tmp_path / "odd.tar"
    with tarfile.open(path, "w", format=fmt) as tar:
        for n, name in enumerate(names):
            data = bytes([n]) * (5000 if name == "big.bin" else 7)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = TarShards(str(path))
    assert [ds[i] for i in range(len(ds))] == webdataset_samples(str(path))
