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

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from seekdata import _globalrng
from seekdata._globalrng import GENERATORS, seed_globals
from seekdata._keys import (
    BATCH,
    ORDER,
    READ,
    SAMPLE,
    STEP,
    batch_counters,
    batch_seeds,
    check_counter,
    check_int,
    check_tuple,
    derive_key,
    global_seeds,
    key_words,
    mix64,
    mix64_int,
    mix64_into,
    mix_keyed,
    read_counter,
    read_seeds,
    sample_seeds,
    seed_columns,
    splitmix64,
    step_seed,
)
from seekdata._streams import STREAMS, Stream

__all__ = [
    "BATCH",
    "GENERATORS",
    "IN_BATCH",
    "IN_READ",
    "ORDER",
    "READ",
    "SAMPLE",
    "STEP",
    "STREAMS",
    "Stream",
    "batch_counters",
    "batch_generator",
    "batch_seeds",
    "capture_globals",
    "check_counter",
    "check_int",
    "check_tuple",
    "current",
    "derive_key",
    "enter_sample",
    "exit_sample",
    "global_seeds",
    "key_words",
    "mix64",
    "mix64_int",
    "mix64_into",
    "mix_keyed",
    "nest",
    "numpy_generator",
    "read_counter",
    "read_generator",
    "read_seeds",
    "restore_globals",
    "sample_generator",
    "sample_rng",
    "sample_scope",
    "sample_seeds",
    "seed_columns",
    "seed_globals",
    "splitmix64",
    "step_seed",
    "torch_generator",
    "unnest",
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
    return _read_stream(seed, epoch, step, batch_counters(epoch, step, checked)[3])


def _read_stream(seed: int, epoch: int, step: int, digest: int) -> np.random.Generator:
    key = np.array(key_words(seed, (READ, epoch), 2), dtype=_U64)
    counter = np.array(read_counter(step, digest), dtype=_U64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


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


# --- the sample being fetched -----------------------------------------------------------------


class _Fetch(threading.local):
    """The sample being fetched in this thread, if any. ``now`` is a list because the loader's
    hot loop writes it, and a list item costs a tenth of a thread-local attribute:

    - ``now[0]``: the index; -1 outside a fetch; :data:`IN_BATCH` while the loader fetches a
      batch with ``map(getitem, now[2])``, where ``now[2]`` is the tuple iterator over the
      batch's indices ``now[3]``: the sample being fetched is the one the iterator just gave,
      found from its length hint, so the loop writes nothing per sample;
    - ``now[1]``: the sample's stream is not keyed yet (index mode);
    - ``now[4]``: the batch position whose stream is keyed (batch mode; -1: none yet);
    - :data:`IN_READ` in ``now[0]`` while the loader reads a batch with one
      ``dataset.__getitems__`` call: ``now[3]`` is the batch's key (epoch, step, indices) and
      ``now[2]`` its stream, made at the first ``sample_rng()`` (None before)."""

    seed: int = -1
    epoch: int = -1
    bitgen: np.random.Philox | None = None
    generator: np.random.Generator | None = None
    state: Any = None  # the Philox state dict, mutated in place and assigned back
    key_for: tuple[int, int] = (-1, -1)

    def __init__(self) -> None:  # runs once in every thread that touches it
        self.now: list[Any] = [-1, False, None, (), -1]


#: ``now[0]`` while the loader fetches a batch by ``map`` (see :class:`_Fetch`).
IN_BATCH = -2
#: ``now[0]`` while the loader reads a batch with ``dataset.__getitems__`` (see :class:`_Fetch`).
IN_READ = -3

#: The sample this thread is fetching: ``seed``, ``epoch`` and ``now`` (see :class:`_Fetch`).
#: Written by the loader's fetch loop and :func:`enter_sample`; read by :func:`sample_rng`.
current = _Fetch()


def sample_rng() -> np.random.Generator:
    """The current sample's ``numpy.random.Generator`` inside a seekdata fetch.

    Its stream is a pure function of (seed, epoch, dataset index): the same whichever
    worker or rank loads the sample. Calls within one fetch continue one stream. The
    object is reused between samples; do not keep it past ``__getitem__``.

    Inside ``dataset.__getitems__`` (the loader reads a whole batch in one call) it is the
    batch's stream (:func:`read_generator`): a pure function of (seed, epoch, step, indices).
    """
    f = current
    now = f.now
    index = now[0]
    if index >= 0:  # enter_sample, or the loader's per-sample loop
        fresh = now[1]
        now[1] = False
    elif index == IN_BATCH:  # the loader's map over the batch: the iterator's last item
        indices = now[3]
        at = len(indices) - now[2].__length_hint__() - 1
        index = indices[at]
        fresh = now[4] != at
        now[4] = at
    elif index == IN_READ:  # one __getitems__ call reads the batch: the batch's stream
        if now[2] is None:
            key = now[3]
            digest = batch_counters(key.epoch, key.step, key.indices)[3]
            now[2] = _read_stream(f.seed, f.epoch, key.step, digest)
        return now[2]
    else:
        raise RuntimeError(
            "sample_rng() must be called while a seekdata loader fetches a sample "
            "(inside dataset.__getitem__); it was called outside one. Outside a loader use "
            "seekdata.sample_generator(seed, epoch, index), or wrap the call in "
            "seekdata.rng.sample_scope(seed, epoch, index)"
        )
    if fresh:
        if f.bitgen is None or f.state is None:
            f.bitgen = np.random.Philox(key=np.zeros(2, dtype=_U64))
            f.generator = np.random.Generator(f.bitgen)
            f.state = f.bitgen.state
        state: Any = f.state
        if f.key_for != (f.seed, f.epoch):
            state["state"]["key"] = np.array(key_words(f.seed, (SAMPLE, f.epoch), 2), _U64)
            f.key_for = (f.seed, f.epoch)
        counter = state["state"]["counter"]
        counter[:] = 0
        counter[2] = index
        state["buffer_pos"] = 4  # discard buffered words of the previous sample
        state["has_uint32"] = 0
        f.bitgen.state = state
    return f.generator  # type: ignore[return-value]  # set on the first fresh call above


def enter_sample(seed: int, epoch: int, index: int, seeds: list[int] | None) -> None:
    """Make (seed, epoch, index) the current sample; reseed global RNG from ``seeds``, a row of
    ``global_seeds(...).tolist()`` (Python ints: numpy scalars cost µs to convert).

    Internal hot path of the loader: no validation, about 9 µs with reseeding.
    """
    f = current
    f.seed, f.epoch = seed, epoch
    now = f.now
    now[0], now[1] = index, True
    if seeds is not None:
        seed_globals(seeds)


def exit_sample() -> None:
    now = current.now
    now[0], now[1] = -1, False


def nest() -> tuple[Any, ...]:
    """Before a nested sample (a :class:`seekdata.Mixture` source, :func:`sample_scope`): what
    :func:`unnest` needs to give the outer sample back its context — and its stream where
    ``sample_rng()`` had already keyed it, since the nested sample re-keys the thread's one
    generator. Free when the outer sample drew nothing (a loader fetching a mixture)."""
    f = current
    now = f.now
    index = now[0]
    if index >= 0:
        keyed = not now[1]
    elif index == IN_BATCH:
        keyed = now[4] == len(now[3]) - now[2].__length_hint__() - 1
    else:
        keyed = False
    stream = f.bitgen.state if keyed and f.bitgen is not None else None
    return f.seed, f.epoch, list(now), stream


def unnest(outer: tuple[Any, ...]) -> None:
    """After a nested sample: the outer sample's context and stream, as :func:`nest` saw them."""
    f = current
    f.seed, f.epoch, f.now[:], stream = outer
    if stream is not None:
        f.bitgen.state = stream  # type: ignore[union-attr]  # set when the stream was saved
        f.key_for = (-1, -1)  # f.state holds the nested key: rewrite it at the next keying


def capture_globals() -> tuple[Any, Any, Any]:
    """Snapshot torch CPU, numpy-legacy and ``random`` global RNG (for num_workers=0); an
    opaque value for :func:`restore_globals`. A few µs: the states are copied as bytes."""
    saved = _globalrng.save(_globalrng.GENERATORS)
    _globalrng.restore(saved)  # saving may leave a generator moved; capturing must not
    return saved


def restore_globals(saved: tuple[Any, Any, Any]) -> None:
    _globalrng.restore(saved)


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
    saved = capture_globals() if reseed_global_rng else None
    outer = nest()
    seeds = global_seeds(seed, epoch, np.array([index])).tolist()[0] if reseed_global_rng else None
    try:
        enter_sample(seed, epoch, index, seeds)
        yield sample_rng()
    finally:
        unnest(outer)
        if saved is not None:
            restore_globals(saved)


__doc__ = (__doc__ or "").replace(
    "{streams}", "\n".join(f"    {s.decision}: {s.counters}  [{s.code}]" for s in STREAMS)
)
