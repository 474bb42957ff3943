"""Corpora at scale, counted: over 20,000 tiny tar shards with a manifest, construction opens
one file locally and reads one object from a real S3 server (moto's, behind the counting
proxy); a resume at 90 % reads the manifest, the indexes of the first batch's shards and that
batch's ranges — nothing more. Opens are counted by Python's audit events, requests at the
server: no mock of seekdata's code."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import seekdata
from seekdata import _servers
from seekdata.sources.files import manifest as mf
from seekdata.sources.remote import Stores
from seekdata.sources.wds import tarindex
from seekdata.wds import TarShards
from tests.helpers import opens, tiny_shards

N = 20_000
BATCH = 8
SEED = 3
BUCKET = "scale-counts"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_shards.write_local(tmp_path_factory.mktemp("scale") / "corpus", N)


def loader(ds: Any) -> seekdata.StatefulDataLoader:
    sampler = seekdata.DistributedSampler(ds, 1, 0, order="shards", seed=SEED)
    return seekdata.StatefulDataLoader(
        ds, batch_size=BATCH, sampler=sampler, collate_fn=lambda b: [s["__key__"] for s in b]
    )


def at_90_percent(ds: Any) -> tuple[dict[str, Any], list[int]]:
    """A loader's state at 90 % of the epoch (a seek: nothing read), and the dataset indices
    of the batch it resumes with."""
    first = loader(ds)
    step = int(0.9 * (N // BATCH))
    first.skip_to(step)
    state = first.state_dict()
    positions = np.arange(step * BATCH, (step + 1) * BATCH)
    return state, first.sampler.indices(0, positions).tolist()


def test_construction_opens_one_file_and_a_resume_only_its_batchs_shards(corpus: str) -> None:
    folder = os.path.dirname(corpus)
    with opens.counting() as opened:
        ds = TarShards(corpus)
    mine = [p for p in opened if p.startswith(folder)]
    assert mine == [os.path.join(folder, mf.manifest_name("tar"))] and len(mine) <= 3
    assert len(ds) == N and ds._lazy.made == 0
    state, indices = at_90_percent(ds)
    shards = {ds.shard_of(i) for i in indices}
    with opens.counting() as opened:
        again = loader(TarShards(corpus))
        again.load_state_dict(state)
        batch = next(iter(again))
    assert batch == [f"k{i:07d}" for i in indices]  # one sample per shard: key k<i>
    names = [os.path.basename(p) for p in opened if p.startswith(folder)]
    want = [mf.manifest_name("tar")]
    for s in shards:
        want += [tiny_shards.name(s, N), tiny_shards.name(s, N) + tarindex.INDEX_SUFFIX]
    assert sorted(names) == sorted(want)


def test_over_s3_construction_is_one_request_and_a_resume_its_batchs(
    corpus: str, proxy: Any
) -> None:
    options = _servers.s3_options(proxy)
    # a checkpoint at 90 % over the local copy: the same shards, the same signature
    state, indices = at_90_percent(TarShards(corpus))
    pattern = tiny_shards.write_s3(
        _servers.s3_client(proxy), BUCKET, "c", N, Stores(options), upload=indices
    )  # the manifest, and the batch's shards with their indexes: any other read would fail
    proxy.reset()
    ds = TarShards(pattern, storage_options=options)
    log = proxy.stats()["log"]
    assert [(e["method"], os.path.basename(e["path"])) for e in log] == [
        ("GET", mf.manifest_name("tar"))
    ]
    assert len(ds) == N
    again = loader(ds)
    again.load_state_dict(state)
    assert next(iter(again)) == [f"k{i:07d}" for i in indices]
    log = proxy.stats()["log"][1:]
    index = sorted(os.path.basename(e["path"]) for e in log if e["path"].endswith(".json"))
    assert index == sorted(tiny_shards.name(i, N) + tarindex.INDEX_SUFFIX for i in indices)
    data = [e for e in log if not e["path"].endswith(".json")]
    # one range per shard (one sample each): from its header to its data's end
    assert sorted((os.path.basename(e["path"]), e["range"]) for e in data) == sorted(
        (tiny_shards.name(i, N), f"bytes=0-{511 + tiny_shards.DATA}") for i in indices
    )
    assert len(log) == 2 * len(indices)
