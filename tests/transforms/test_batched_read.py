"""``TransformedDataset(batched_read=True)``: a source that reads a batch at once (a remote
``TarShards``) keeps its batched read through the wrapper, and every sample's transform runs
under its own key: the stream is the per-sample path's, bit for bit."""

from __future__ import annotations

import pathlib
import random
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from seekdata.testing import assert_exact_resume
from seekdata.transforms import TransformedDataset


class Rows(torch.utils.data.Dataset):
    """A source with a pure batched read, counting how it is read (in this process)."""

    def __init__(self, n: int = 23) -> None:
        self.n = n
        self.calls = {"getitem": 0, "getitems": 0}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.calls["getitem"] += 1
        return torch.full((2,), float(index)), index % 3

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        self.calls["getitems"] += 1
        return [(torch.full((2,), float(i)), i % 3) for i in indices]


def noisy(x: Any, rng: np.random.Generator) -> Any:
    """Draws from its stream and from all three global generators directly (the hardest case:
    the batched path must reseed them per sample, as the loader's per-sample fetch does)."""
    extra = [rng.random(), float(torch.rand(())), np.random.rand(), random.random()]
    return torch.cat([x, torch.tensor(extra, dtype=x.dtype)])


def _stream(dataset: Any, **kw: Any) -> list[Any]:
    loader = seekdata.StatefulDataLoader(dataset, batch_size=4, shuffle=True, seed=11, **kw)
    out = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        out += [(x.clone(), y.clone()) for x, y in loader]
    return out


def _equal(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b, strict=True)
    )


def test_the_batched_read_gives_the_per_sample_stream_bit_for_bit() -> None:
    """Same samples, same augmentations, on every path the loader takes (workers 0 and 2, the
    per-sample read forced with batched_fetch=False); the source is read once per batch."""
    per_sample = _stream(TransformedDataset(Rows(), noisy, field=0))
    source = Rows()
    batched = TransformedDataset(source, noisy, field=0, batched_read=True)
    assert _equal(_stream(batched), per_sample)
    assert source.calls == {"getitem": 0, "getitems": 12}  # 6 batches x 2 epochs, one read each
    assert _equal(_stream(batched, num_workers=2), per_sample)
    assert _equal(_stream(batched, batched_fetch=False), per_sample)
    # the default keeps the per-sample read (existing streams never change), as does a source
    # without a batched read
    assert not hasattr(TransformedDataset(Rows(), noisy), "__getitems__")
    assert not hasattr(TransformedDataset(list(range(3)), noisy, batched_read=True), "__getitems__")


@pytest.mark.parametrize("reseed", [False, ("torch",)])
def test_the_loaders_reseed_set_is_kept(reseed: Any) -> None:
    """With the loader's ``reseed_global_rng`` passed on, the batched read reseeds what the
    per-sample fetch reseeds, nothing more (a transform drawing only from its stream)."""

    def explicit(x: Any, rng: np.random.Generator) -> Any:
        return torch.cat([x, torch.tensor([rng.random(), float(torch.rand(()))])])

    kw = {"reseed_global_rng": reseed}
    per_sample = _stream(TransformedDataset(Rows(), explicit, field=0), **kw)
    batched = TransformedDataset(Rows(), explicit, field=0, batched_read=True, **kw)
    got = _stream(batched, **kw)
    if reseed:
        assert _equal(got, per_sample)
    else:  # global RNG is nobody's: only the stream's draws are compared
        assert len(got) == len(per_sample)
        assert all(
            torch.equal(x[:3], u[:3]) for (x, _), (u, _) in zip(got, per_sample, strict=True)
        )


def test_the_batched_read_resumes_exactly() -> None:
    def make(**kw: Any) -> seekdata.StatefulDataLoader:
        ds = TransformedDataset(Rows(), noisy, field=0, batched_read=True)
        return seekdata.StatefulDataLoader(ds, batch_size=4, shuffle=True, seed=3, **kw)

    assert assert_exact_resume(make, resume_kwargs={"num_workers": 2}, stop_at=[0, 3, 6]) == 3


def test_outside_a_loader_and_a_read_that_does_not_fit_are_refused() -> None:
    ds = TransformedDataset(Rows(), noisy, field=0, batched_read=True)
    with pytest.raises(RuntimeError, match="inside a seekdata loader's batched read"):
        ds.__getitems__([0, 1])

    class Columns(Rows):
        def __getitems__(self, indices: list[int]) -> Any:
            return {"x": torch.zeros(len(indices))}

    loader = seekdata.StatefulDataLoader(
        TransformedDataset(Columns(), noisy, batched_read=True), batch_size=4
    )
    with pytest.raises(ValueError, match="one sample per index"):
        next(iter(loader))
    with pytest.raises(TypeError, match="batched_read"):
        TransformedDataset(Rows(), noisy, batched_read=1)  # type: ignore[arg-type]


def test_remote_tar_shards_augmented_at_full_speed_equal_the_local_stream(
    tmp_path: pathlib.Path,
) -> None:
    """The issue's case: remote tar shards over HTTP, augmented through the wrapper, keep their
    batched read (one ``__getitems__`` per batch) and give the local shards' augmented stream,
    bit for bit."""
    from seekdata._servers import http_server
    from seekdata.wds import TarShards
    from tests.helpers.shards import write_shards

    write_shards(tmp_path, n=30, per_shard=10)

    def jitter(sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        data = np.frombuffer(sample["bin"], dtype=np.uint8)
        noise = rng.integers(0, 4, size=data.shape, dtype=np.uint8)
        return {"key": sample["__key__"], "x": torch.from_numpy(data + noise), "g": torch.rand(2)}

    def stream(dataset: Any) -> list[Any]:
        loader = seekdata.StatefulDataLoader(
            dataset, batch_size=4, shuffle=True, seed=5, collate_fn=list
        )
        return [s for batch in loader for s in batch]

    local = stream(TransformedDataset(TarShards(str(tmp_path / "shard-{000..002}.tar")), jitter))
    with http_server(tmp_path) as server:
        remote = TarShards(f"{server.url}/shard-{{000..002}}.tar", index_dir=str(tmp_path / "i"))
        reads = []
        inner = type(remote).__getitems__

        class Counted(type(remote)):  # type: ignore[misc]
            def __getitems__(self, indices: Any) -> Any:
                reads.append(len(indices))
                return inner(self, indices)

        remote.__class__ = Counted
        got = stream(TransformedDataset(remote, jitter, batched_read=True))
    assert reads == [4] * 7 + [2]
    assert len(got) == len(local) == 30
    for a, b in zip(got, local, strict=True):
        assert a["key"] == b["key"] and torch.equal(a["x"], b["x"]) and torch.equal(a["g"], b["g"])
