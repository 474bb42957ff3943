"""The sample being fetched in this thread: what :func:`seekdata.sample_rng` reads.

The loader's fetch loop (:mod:`seekdata._loader.fetch`), :class:`seekdata.Mixture` and
:func:`seekdata.rng.sample_scope` write :data:`current`; :func:`sample_rng` reads it and keys
one reused Philox generator per thread from (seed, epoch, index), or returns the batch's stream
inside a batched read. Nested samples (a mixture's source, a scope inside a fetch) save and
give back the outer one with :func:`nest` / :func:`unnest`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from seekdata._core.globalrng import seed_globals
from seekdata._core.rngkeys import READ, SAMPLE, batch_counters, key_words, read_counter

__all__ = [
    "AT",
    "FRESH",
    "INDEX",
    "INDICES",
    "IN_BATCH",
    "IN_READ",
    "ITER",
    "current",
    "enter_sample",
    "exit_sample",
    "nest",
    "read_stream",
    "sample_rng",
    "unnest",
]

_U64 = np.uint64


def read_stream(seed: int, epoch: int, batch: int, indices: Any) -> np.random.Generator:
    """The stream of a batched read of ``indices`` as batch ``batch`` of ``epoch``: Philox,
    key (seed, READ, epoch), counter (0, batch, crc32 of the indices, 0)
    (:func:`seekdata.rng.read_generator`, checked)."""
    digest = batch_counters(epoch, batch, indices)[3]
    key = np.array(key_words(seed, (READ, epoch), 2), dtype=_U64)
    counter = np.array(read_counter(batch, digest), dtype=_U64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


#: The slots of :attr:`_Fetch.now`, by name.
INDEX = 0  # the sample's dataset index; -1 outside a fetch; IN_BATCH or IN_READ for a batch
FRESH = 1  # index mode: the sample's stream is not keyed yet
ITER = 2  # IN_BATCH: the tuple iterator over the batch's indices; IN_READ: the batch's stream
INDICES = 3  # IN_BATCH: the batch's indices; IN_READ: the planned batch (epoch, batch, indices)
AT = 4  # IN_BATCH: the batch position whose stream is keyed (-1: none yet)


class _Fetch(threading.local):
    """The sample being fetched in this thread, if any. ``now`` is a list because the loader's
    hot loop writes it, and a list item costs a tenth of a thread-local attribute; its slots
    are named by :data:`INDEX`, :data:`FRESH`, :data:`ITER`, :data:`INDICES`, :data:`AT`:

    - ``now[INDEX]``: the index; -1 outside a fetch; :data:`IN_BATCH` while the loader fetches
      a batch with ``map(getitem, now[ITER])``, where ``now[ITER]`` is the tuple iterator over
      the batch's indices ``now[INDICES]``: the sample being fetched is the one the iterator
      just gave, found from its length hint, so the loop writes nothing per sample;
    - ``now[FRESH]``: the sample's stream is not keyed yet (index mode);
    - ``now[AT]``: the batch position whose stream is keyed (batch mode; -1: none yet);
    - :data:`IN_READ` in ``now[INDEX]`` while the loader reads a batch with one
      ``dataset.__getitems__`` call: ``now[INDICES]`` is the planned batch (epoch, batch,
      indices) and ``now[ITER]`` its stream, made at the first ``sample_rng()``."""

    seed: int = -1
    epoch: int = -1
    bitgen: np.random.Philox | None = None
    generator: np.random.Generator | None = None
    state: Any = None  # the Philox state dict, mutated in place and assigned back
    key_for: tuple[int, int] = (-1, -1)
    # a seekdata thread worker (worker_method="thread"): global RNG is every thread's, so
    # nothing reseeds it here (a Mixture reads this), and the loader watches it instead
    threaded: bool = False

    def __init__(self) -> None:  # runs once in every thread that touches it
        self.now: list[Any] = [-1, False, None, (), -1]


#: ``now[INDEX]`` while the loader fetches a batch by ``map`` (see :class:`_Fetch`).
IN_BATCH = -2
#: ``now[INDEX]`` while the loader reads a batch with ``dataset.__getitems__`` (:class:`_Fetch`).
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
    index = now[INDEX]
    if index >= 0:  # enter_sample, or the loader's per-sample loop
        fresh = now[FRESH]
        now[FRESH] = False
    elif index == IN_BATCH:  # the loader's map over the batch: the iterator's last item
        indices = now[INDICES]
        at = len(indices) - now[ITER].__length_hint__() - 1
        index = indices[at]
        fresh = now[AT] != at
        now[AT] = at
    elif index == IN_READ:  # one __getitems__ call reads the batch: the batch's stream
        if now[ITER] is None:
            planned = now[INDICES]
            now[ITER] = read_stream(f.seed, f.epoch, planned.batch, planned.indices)
        return now[ITER]
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
    now[INDEX], now[FRESH] = index, True
    if seeds is not None:
        seed_globals(seeds)


def exit_sample() -> None:
    now = current.now
    now[INDEX], now[FRESH] = -1, False


def nest() -> tuple[Any, ...]:
    """Before a nested sample (a :class:`seekdata.Mixture` source, :func:`sample_scope`): what
    :func:`unnest` needs to give the outer sample back its context — and its stream where
    ``sample_rng()`` had already keyed it, since the nested sample re-keys the thread's one
    generator. Free when the outer sample drew nothing (a loader fetching a mixture)."""
    f = current
    now = f.now
    index = now[INDEX]
    if index >= 0:
        keyed = not now[FRESH]
    elif index == IN_BATCH:
        keyed = now[AT] == len(now[INDICES]) - now[ITER].__length_hint__() - 1
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
