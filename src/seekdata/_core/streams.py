"""seekdata's random streams: the table of every stream with its counters (:data:`STREAMS`),
and the generators keyed by counters that the loader, the sources and users draw from.

The public face is :mod:`seekdata.rng` (its docstring states the rules and prints the table);
docs/randomness.md shows the same table; tests/core/test_rng.py checks both, and each row against
the code. The key derivation itself is :mod:`seekdata._core.rngkeys`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import torch

from seekdata._core import globalrng as _globalrng
from seekdata._core.checks import check_counter
from seekdata._core.globalrng import seed_globals
from seekdata._core.rngkeys import (
    BATCH,
    ORDER,
    READ,
    SAMPLE,
    STEP,
    batch_counters,
    batch_seeds,
    check_tuple,
    derive_key,
    global_seeds,
    key_words,
    mix_keyed,
    read_seeds,
)
from seekdata._core.sample import enter_sample, nest, read_stream, sample_rng, unnest

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


class Stream(NamedTuple):
    """One row of the randomness table: a decision, the counters it is a function of, and
    the code that derives it."""

    decision: str
    counters: str
    code: str


#: Every stream seekdata derives: the single source of the table in this docstring and in
#: docs/randomness.md (tests/core/test_rng.py checks both, and each row against the code).
STREAMS = (
    Stream(
        "epoch order: dataset index at global position p",
        "Feistel rounds keyed by (seed, ORDER, epoch), applied to p",
        "seekdata.order.Feistel",
    ),
    Stream(
        "a sample's own stream",
        "Philox, key (seed, SAMPLE, epoch), counter (0, 0, dataset index, 0)",
        "seekdata.sample_rng(), seekdata.sample_generator",
    ),
    Stream(
        "a transform step's stream (Compose)",
        "the sample's Philox key, counter (0, 0, index, splitmix64 chain of the step path)",
        "seekdata.transforms.Compose",
    ),
    Stream(
        "global RNG while a sample is fetched",
        "key (seed, SAMPLE, epoch), mix_keyed of the dataset index",
        "seekdata.rng.global_seeds",
    ),
    Stream(
        "a batch-level transform (mixup, cutmix)",
        "(seed, BATCH, epoch, step on this rank, crc32 of the batch's indices)",
        "seekdata.rng.batch_generator",
    ),
    Stream(
        "global RNG while a batch is collated",
        "key (seed, BATCH, epoch), mix_keyed of (step, crc32 of the indices)",
        "seekdata.rng.batch_seeds",
    ),
    Stream(
        "global RNG while a batch is read (dataset.__getitems__)",
        "key (seed, READ, epoch), mix_keyed of (step, crc32 of the indices)",
        "seekdata.rng.read_seeds",
    ),
    Stream(
        "a batched read's stream (sample_rng() inside __getitems__)",
        "Philox, key (seed, READ, epoch), counter (0, step on this rank, crc32 of the indices, 0)",
        "seekdata.sample_rng(), seekdata.rng.read_generator",
    ),
    Stream(
        "an iterable dataset's worker: global RNG",
        "(seed, WORKER, epoch, rank, worker)",
        "the loader's worker_init_fn",
    ),
    Stream(
        "model-side global RNG (dropout, noise)",
        "(seed, step, rank), key words 2 to 5",
        "seekdata.set_step_rng",
    ),
    Stream(
        "model-side global RNG, keyed by the loader (step_rng=True)",
        "set_step_rng of (key (seed, STEP, epoch), batch in the epoch, rank), at each batch",
        "seekdata.StatefulDataLoader",
    ),
    Stream(
        "model-side explicit randomness",
        "(seed, step, rank) or any tuple of yours, key words 0 and 1",
        "seekdata.torch_generator, seekdata.numpy_generator",
    ),
)


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
