"""Adapters: a dataset with a transform on the sample's stream; global-RNG transforms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from seekdata._core import sample as _sample
from seekdata._core import source as _source
from seekdata._core.checks import check_bool
from seekdata._core.globalrng import capture as capture_globals
from seekdata._core.globalrng import reseed_set, seed_globals
from seekdata._core.globalrng import restore as restore_globals
from seekdata._core.rngkeys import seed_columns
from seekdata._core.sample import sample_rng
from seekdata._core.streams import sample_scope
from seekdata.transforms._arrays import check_callable, check_generator
from seekdata.transforms._compose import Transform


class TransformedDataset(_source.WrapsSource, Dataset):
    """Map-style dataset: ``ds[i] = transform(dataset[i], seekdata.sample_rng())``.

    The stream is the sample's, a pure function of (seed, epoch, i), so a seekdata loader
    gives each sample the same augmentation whichever worker or rank loads it. Outside a
    loader, :meth:`get` runs one fetch with an explicit key.

    ``field`` (an int or a str) applies the transform to ``sample[field]`` only, for
    samples that are tuples, lists or dicts such as ``(image, label)``; the other entries
    pass through.

    It answers the source protocol for ``dataset`` (:class:`seekdata.sources.SeekableSource`):
    its ``stream_signature``, shards, growth and the rest are the wrapped dataset's, so a
    checkpoint over other data is refused through the wrapper as without it. The signature
    does not cover the transform: changing an augmentation between runs is yours to decide.

    ``batched_read=True`` keeps the batched read of a source that has one (``__getitems__``: a
    remote ``TarShards``, the token corpora): the loader reads a batch of the source in one
    call, and each sample's transform still runs under its own key, ``sample_rng()`` at
    (seed, epoch, index) and global RNG reseeded from the same key (the generators
    ``reseed_global_rng`` names: pass the loader's value if you changed it). The samples are
    then the per-sample path's, bit for bit, for a source whose read draws no randomness
    (seekdata's sources draw none). Off by default: a source of yours whose read draws from
    ``sample_rng()`` or global RNG would draw the batch's numbers instead (docs/augmentations.md).
    """

    def __init__(
        self,
        dataset: Any,
        transform: Transform,
        *,
        field: int | str | None = None,
        batched_read: bool = False,
        reseed_global_rng: Any = True,
    ) -> None:
        where = "TransformedDataset"
        if not hasattr(dataset, "__getitem__"):
            raise TypeError(
                f"{where}: dataset must be map-style (have __getitem__); got "
                f"{type(dataset).__name__}; wrap an indexable dataset"
            )
        check_callable(transform, "transform", where)
        if field is not None and (isinstance(field, bool) or not isinstance(field, int | str)):
            raise TypeError(
                f"{where}: field must be None, an int position or a str key; got "
                f"{type(field).__name__} {field!r}; pass e.g. field=0 for (image, label) samples"
            )
        self.dataset = dataset
        self.transform = transform
        self.field = field
        self.batched_read = check_bool(batched_read, "batched_read", where)
        self.reseed_global_rng = reseed_global_rng
        self._reseed = reseed_set(reseed_global_rng, where)

    @property
    def reseeds_global_rng_itself(self) -> Any:
        """The wrapped dataset's (a :class:`seekdata.Mixture` reseeds each sample itself): this
        class draws nothing from global RNG before fetching ``dataset[i]``, so the loader's
        reseeding before it would be overwritten unseen. A subclass that overrides
        ``__getitem__`` may draw first: the loader reseeds for it."""
        value = _source.declared(self.dataset, "reseeds_global_rng_itself")
        if value is _source.ABSENT or type(self).__getitem__ is not TransformedDataset.__getitem__:
            raise AttributeError(
                f"{type(self).__name__}: no reseeds_global_rng_itself (its dataset declares none, "
                f"or it overrides __getitem__)"
            )
        return value

    def _batched(self) -> bool:
        """``batched_read=True`` over a source that reads a batch at once, or that fetches a
        batch's bytes ahead (declares ``prefetch``: the file-backed sources, whose
        ``__getitems__`` is that fetch, then each item, and draws nothing)."""
        if not self.batched_read:
            return False
        ds = self.dataset
        return _source.reads_in_batches(ds) or (
            _source.prefetch(ds) is not None and callable(getattr(ds, "__getitems__", None))
        )

    @property
    def reads_batches(self) -> Any:
        """True when :meth:`_batched` (this wrapper reads the batch, each transform under its
        sample's key); else the wrapped dataset's declaration (source protocol)."""
        if self._batched():
            return True
        value = _source.declared(self.dataset, "reads_batches")
        if value is _source.ABSENT:
            raise AttributeError(f"{type(self).__name__}: its dataset declares no reads_batches")
        return value

    @property
    def __getitems__(self) -> Any:
        """With ``batched_read=True`` over a source that reads a batch at once: the loader's
        batched read (:meth:`_read_batch`); otherwise absent, and the loader fetches each
        sample with ``__getitem__`` under its key."""
        if not self._batched():
            raise AttributeError(
                f"{type(self).__name__}: no __getitems__ (batched_read=False, or its dataset "
                f"{type(self.dataset).__name__} reads one sample at a time)"
            )
        return self._read_batch

    def _read_batch(self, indices: Sequence[int]) -> list[Any]:
        """One ``dataset.__getitems__(indices)`` call, then each sample's transform under its
        own key, as :meth:`__getitem__` would run it: ``sample_rng()`` at (seed, epoch, index),
        global RNG reseeded from the same key (:func:`seekdata._core.rngkeys.seed_columns`,
        the loader's per-sample derivation)."""
        fetch = _sample.reading()
        if fetch is None:
            raise RuntimeError(
                f"TransformedDataset.__getitems__({list(indices)[:8]}) must run inside a "
                "seekdata loader's batched read, which supplies the batch's (seed, epoch); it "
                "was called outside one. Iterate it with seekdata.StatefulDataLoader, or call "
                "ds.get(index, seed=..., epoch=...) per sample"
            )
        seed, epoch = fetch
        samples = self.dataset.__getitems__(indices)
        if isinstance(samples, Mapping) or len(samples) != len(indices):
            got = "a mapping" if isinstance(samples, Mapping) else f"{len(samples)} samples"
            raise ValueError(
                f"TransformedDataset(batched_read=True): {type(self.dataset).__name__}."
                f"__getitems__ must return one sample per index ({len(indices)}) to transform "
                f"each; it returned {got}; pass batched_read=False"
            )
        reseed = self._reseed
        columns = seed_columns(seed, epoch, indices) if reseed else None
        out = []
        outer = _sample.nest()
        try:
            for at, (index, sample) in enumerate(zip(indices, samples, strict=True)):
                _sample.enter_sample(seed, epoch, int(index), None)
                if columns is not None:
                    seed_globals((columns[0][at], columns[1][at], columns[2][at]), reseed)
                out.append(self._apply(sample, sample_rng()))
        finally:
            _sample.unnest(outer)
        return out

    def _apply(self, sample: Any, rng: np.random.Generator) -> Any:
        field = self.field
        if field is None:
            return self.transform(sample, rng)
        try:
            part = sample[field]
        except (IndexError, KeyError, TypeError) as err:
            raise ValueError(
                f"TransformedDataset: field={field!r} must select an entry of each sample; "
                f"the sample is a {type(sample).__name__} without it; pass a field it has"
            ) from err
        if isinstance(sample, tuple | list):
            items = list(sample)
            items[field] = self.transform(part, rng)  # type: ignore[index]
            return tuple(items) if isinstance(sample, tuple) else items
        out = dict(sample)
        out[field] = self.transform(part, rng)
        return out

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        try:
            rng = sample_rng()
        except RuntimeError as err:
            raise RuntimeError(
                f"TransformedDataset[{index}] must run inside a seekdata loader's fetch, which "
                "supplies the sample's (seed, epoch) key; it was called outside one. Iterate it "
                "with seekdata.StatefulDataLoader, or call ds.get(index, seed=..., epoch=...)"
            ) from err
        return self._apply(self.dataset[index], rng)

    def get(self, index: int, *, seed: int, epoch: int) -> Any:
        """Sample ``index`` as a seekdata loader with ``seed`` yields it in ``epoch``.

        Runs under :func:`seekdata.rng.sample_scope`: global RNG is seeded from the key
        for the call and restored afterwards.
        """
        with sample_scope(seed, epoch, index) as rng:
            return self._apply(self.dataset[index], rng)

    def __repr__(self) -> str:
        more = ", batched_read=True" if self.batched_read else ""
        return f"TransformedDataset({self.dataset!r}, {self.transform!r}{more})"


_M64 = (1 << 64) - 1


class _FromGlobalRng:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, sample: Any, rng: np.random.Generator) -> Any:
        check_generator(rng, "from_global_rng")
        torch_seed, numpy_seed, python_seed = rng.integers(
            0, _M64, size=3, dtype=np.uint64, endpoint=True
        ).tolist()
        saved = capture_globals()
        try:
            # numpy's legacy global seed takes 32 bits
            seed_globals((torch_seed, numpy_seed >> 32, python_seed))
            return self.fn(sample)
        finally:
            restore_globals(saved)

    def __repr__(self) -> str:
        return f"from_global_rng({self.fn!r})"


def from_global_rng(fn: Any) -> Transform:
    """Wrap ``fn(sample)``, which draws from global RNG (a torchvision transform, say),
    into a transform ``(sample, rng) -> sample``.

    Each call seeds torch's CPU default generator, numpy's legacy global RNG and
    ``random`` from three draws of ``rng``, runs ``fn``, and restores the caller's
    global state, even on error. Costs 100-200 µs a call, mostly saving and restoring
    numpy's and ``random``'s state. CUDA generators are not touched; not thread-safe
    (global RNG is per process).
    """
    check_callable(fn, "fn", "from_global_rng", "fn(sample) -> sample")
    return _FromGlobalRng(fn)
