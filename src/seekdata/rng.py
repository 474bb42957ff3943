"""Counter-based randomness: every random number is a pure function of counters.

The rules
---------
Nothing random in seekdata is *stateful*. Each random decision is derived from a tuple of
counters. The one key primitive is :func:`derive_key` (:func:`key_words` unchecked): numpy
``SeedSequence`` hashes the tuple into 64-bit words, never arithmetic such as
``seed + epoch``. Where a per-element key would cost a hash per sample, the words are spread
over the element with :func:`mix_keyed` (splitmix64's finaliser, :func:`mix64`, under two key
words). Global RNG is set in one place, :func:`seed_globals`, from a row of seeds.

Every stream, with its counters (:data:`STREAMS`; docs/randomness.md shows the same table)::

{streams}

The sample key leaves out rank and worker on purpose: the same sample gets the same
augmentation whichever rank or worker loads it, so world size and ``num_workers`` can change
at resume without changing the data stream.

Data-side streams carry a domain tag (:data:`ORDER`, :data:`SAMPLE`, :data:`BATCH`), so a
sample key can never collide with a user's own tuple such as ``(seed, step, rank)``.

Public entry points: :func:`numpy_generator` and :func:`torch_generator` for any counter
tuple; :func:`sample_generator` for a sample's stream outside a loader; :func:`sample_rng`
for the current sample's stream inside a loader's fetch; :func:`batch_generator` for a
batch transform's stream. The rest is the loader's machinery, documented for readers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from seekdata._core import globalrng as _globalrng
from seekdata._core.globalrng import seed_globals
from seekdata._core.rngkeys import (
    BATCH,
    ORDER,
    READ,
    SAMPLE,
    STEP,
    batch_counters,
    batch_seeds,
    check_counter,
    check_tuple,
    derive_key,
    global_seeds,
    key_words,
    mix_keyed,
    read_seeds,
)
from seekdata._core.sample import enter_sample, nest, read_stream, sample_rng, unnest
from seekdata._core.streams import STREAMS, Stream

__all__ = [
    "BATCH",
    "ORDER",
    "READ",
    "SAMPLE",
    "STEP",
    "STREAMS",
    "Stream",
    "batch_generator",
    "batch_seeds",
    "derive_key",
    "global_seeds",
    "mix_keyed",
    "numpy_generator",
    "read_generator",
    "read_seeds",
    "sample_generator",
    "sample_rng",
    "sample_scope",
    "seed_globals",
    "torch_generator",
]


_U64 = np.uint64


def numpy_generator(seed: int, *counters: int) -> np.random.Generator:
    """A ``numpy.random.Generator`` (Philox) whose stream is a pure function of the tuple.

    >>> a = numpy_generator(0, 3, 7).integers(0, 100, 4)
    >>> b = numpy_generator(0, 3, 7).integers(0, 100, 4)
    >>> bool((a == b).all())
    True
    """
    seed, counters = check_tuple(seed, counters, "numpy_generator")
    key = np.array(key_words(seed, counters, 2), dtype=_U64)
    return np.random.Generator(np.random.Philox(key=key))


def torch_generator(
    seed: int, *counters: int, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from the hashed tuple.

    Use it for explicit model-side randomness, e.g. per-step noise:
    ``torch.randn(shape, generator=torch_generator(seed, step, rank))``.
    """
    seed, counters = check_tuple(seed, counters, "torch_generator")
    generator = torch.Generator(device=device)
    generator.manual_seed(key_words(seed, counters, 2)[0])
    return generator


# --- per-sample streams ---------------------------------------------------------------------
#
# A sample's stream is Philox keyed by (seed, SAMPLE, epoch) with the dataset index in the
# third counter word: one SeedSequence hash per epoch, then O(1) for any index. Each sample
# owns 2**128 blocks of the counter space, so streams never overlap.


def sample_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The stream a seekdata loader gives sample ``index`` of ``epoch`` (see :func:`sample_rng`).

    Use it to reproduce a sample's augmentation outside a loader.
    """
    seed = check_counter(seed, "seed", "sample_generator")
    epoch = check_counter(epoch, "epoch", "sample_generator")
    index = check_counter(index, "index", "sample_generator")
    key = np.array(key_words(seed, (SAMPLE, epoch), 2), dtype=_U64)
    counter = np.array([0, 0, index, 0], dtype=_U64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


# --- per-batch streams ------------------------------------------------------------------------


def batch_generator(
    seed: int, epoch: int, step: int, indices: Sequence[int]
) -> np.random.Generator:
    """The stream a seekdata loader hands ``batch_transform`` for the batch of dataset
    ``indices`` at ``step`` (batches of the epoch on this rank, from 0) of ``epoch``."""
    seed, epoch, step, checked = _check_batch(seed, epoch, step, indices, "batch_generator")
    return numpy_generator(seed, *batch_counters(epoch, step, checked))


def read_generator(seed: int, epoch: int, step: int, indices: Sequence[int]) -> np.random.Generator:
    """The stream :func:`sample_rng` returns while a seekdata loader reads the batch of dataset
    ``indices`` at ``step`` of ``epoch`` with one ``dataset.__getitems__`` call."""
    seed, epoch, step, checked = _check_batch(seed, epoch, step, indices, "read_generator")
    return read_stream(seed, epoch, step, checked)


def _check_batch(
    seed: Any, epoch: Any, step: Any, indices: Any, where: str
) -> tuple[int, int, int, tuple[int, ...]]:
    seed = check_counter(seed, "seed", where)
    epoch = check_counter(epoch, "epoch", where)
    step = check_counter(step, "step", where)
    if isinstance(indices, str | bytes) or not isinstance(indices, Sequence | np.ndarray):
        raise TypeError(
            f"{where}: indices must be the batch's dataset indices (a sequence of ints); got "
            f"{type(indices).__name__}; pass e.g. indices=[3, 1, 4]"
        )
    return seed, epoch, step, tuple(check_counter(i, "index", where) for i in indices)


@contextmanager
def sample_scope(
    seed: int, epoch: int, index: int, *, reseed_global_rng: bool = True
) -> Iterator[np.random.Generator]:
    """Run a block as the fetch of sample ``index``: what a seekdata loader does around
    ``dataset[index]``. Global RNG is reseeded from the key and restored afterwards.

    >>> with sample_scope(0, 1, 42) as rng:
    ...     a = rng.random()
    >>> bool(a == sample_generator(0, 1, 42).random())
    True
    """
    seed = check_counter(seed, "seed", "sample_scope")
    epoch = check_counter(epoch, "epoch", "sample_scope")
    index = check_counter(index, "index", "sample_scope")
    saved = _globalrng.capture() if reseed_global_rng else None
    outer = nest()
    seeds = global_seeds(seed, epoch, np.array([index])).tolist()[0] if reseed_global_rng else None
    try:
        enter_sample(seed, epoch, index, seeds)
        yield sample_rng()
    finally:
        unnest(outer)
        if saved is not None:
            _globalrng.restore(saved)


__doc__ = (__doc__ or "").replace(
    "{streams}", "\n".join(f"    {s.decision}: {s.counters}  [{s.code}]" for s in STREAMS)
)
