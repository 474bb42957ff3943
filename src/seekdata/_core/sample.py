"""The sample being fetched in this thread: what :func:`seekdata.sample_rng` reads, and the
loop that fetches a batch under its samples' keys.

The context is this module's alone (one ``threading.local``: each thread has its own); other
modules go through functions:

- the loader's fetch (:mod:`seekdata._loader.fetch`) hands a batch to :func:`fetch_batch`, which
  runs ``dataset[index]`` per sample with the sample current (and global RNG reseeded from its
  key), or brackets one ``dataset.__getitems__`` call with :func:`enter_read` / :func:`exit_read`;
- :class:`seekdata.Mixture` and :func:`seekdata.rng.sample_scope` make a nested sample current
  with :func:`nest`, :func:`enter_sample` and :func:`unnest`, and ask :func:`fetching` /
  :func:`reading` what the loader is doing;
- :func:`sample_rng` reads it and keys one reused Philox generator per thread from
  (seed, epoch, index), or returns the batch's stream inside a batched read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from seekdata._core import globalrng as _globalrng
from seekdata._core.globalrng import seed_globals
from seekdata._core.rngkeys import (
    READ,
    SAMPLE,
    batch_counters,
    key_words,
    read_counter,
    seed_columns,
)

__all__ = [
    "enter_read",
    "enter_sample",
    "exit_read",
    "exit_sample",
    "fetch_batch",
    "fetching",
    "mark_threaded",
    "nest",
    "read_stream",
    "reading",
    "sample_rng",
    "threaded",
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


# The slots of :attr:`_Fetch.now`, by name.
_INDEX = 0  # the sample's dataset index; -1 outside a fetch; _IN_BATCH or _IN_READ for a batch
_FRESH = 1  # index mode: the sample's stream is not keyed yet
_ITER = 2  # _IN_BATCH: the tuple iterator over the batch's indices; _IN_READ: the batch's stream
_INDICES = 3  # _IN_BATCH: the batch's indices; _IN_READ: the planned batch (epoch, batch, indices)
_AT = 4  # _IN_BATCH: the batch position whose stream is keyed (-1: none yet)


class _Fetch(threading.local):
    """The sample being fetched in this thread, if any. ``now`` is a list because the fetch
    loop (:func:`fetch_batch`) writes it, and a list item costs a tenth of a thread-local
    attribute; its slots are named by ``_INDEX``, ``_FRESH``, ``_ITER``, ``_INDICES``, ``_AT``:

    - ``now[_INDEX]``: the index; -1 outside a fetch; ``_IN_BATCH`` while the loader fetches
      a batch with ``map(getitem, now[_ITER])``, where ``now[_ITER]`` is the tuple iterator over
      the batch's indices ``now[_INDICES]``: the sample being fetched is the one the iterator
      just gave, found from its length hint, so the loop writes nothing per sample;
    - ``now[_FRESH]``: the sample's stream is not keyed yet (index mode);
    - ``now[_AT]``: the batch position whose stream is keyed (batch mode; -1: none yet);
    - ``_IN_READ`` in ``now[_INDEX]`` while the loader reads a batch with one
      ``dataset.__getitems__`` call: ``now[_INDICES]`` is the planned batch (epoch, batch,
      indices) and ``now[_ITER]`` its stream, made at the first ``sample_rng()``."""

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


#: ``now[_INDEX]`` while the loader fetches a batch by ``map`` (see :class:`_Fetch`).
_IN_BATCH = -2
#: ``now[_INDEX]`` while the loader reads a batch with ``dataset.__getitems__`` (:class:`_Fetch`).
_IN_READ = -3

# The sample this thread is fetching: ``seed``, ``epoch`` and ``now`` (see :class:`_Fetch`).
# Written by :func:`fetch_batch`, :func:`enter_read` and :func:`enter_sample`; read by
# :func:`sample_rng`. Private: other modules go through this module's functions, so the context
# can change form (one per thread today) without them changing.
_current = _Fetch()


def sample_rng() -> np.random.Generator:
    """The current sample's ``numpy.random.Generator`` inside a seekdata fetch.

    Its stream is a pure function of (seed, epoch, dataset index): the same whichever
    worker or rank loads the sample. Calls within one fetch continue one stream. The
    object is reused between samples; do not keep it past ``__getitem__``.

    Inside ``dataset.__getitems__`` (the loader reads a whole batch in one call) it is the
    batch's stream (:func:`read_generator`): a pure function of (seed, epoch, step, indices).
    """
    f = _current
    now = f.now
    index = now[_INDEX]
    if index >= 0:  # enter_sample, or the loader's per-sample loop
        fresh = now[_FRESH]
        now[_FRESH] = False
    elif index == _IN_BATCH:  # the loader's map over the batch: the iterator's last item
        indices = now[_INDICES]
        at = len(indices) - now[_ITER].__length_hint__() - 1
        index = indices[at]
        fresh = now[_AT] != at
        now[_AT] = at
    elif index == _IN_READ:  # one __getitems__ call reads the batch: the batch's stream
        if now[_ITER] is None:
            planned = now[_INDICES]
            now[_ITER] = read_stream(f.seed, f.epoch, planned.batch, planned.indices)
        return now[_ITER]
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
    f = _current
    f.seed, f.epoch = seed, epoch
    now = f.now
    now[_INDEX], now[_FRESH] = index, True
    if seeds is not None:
        seed_globals(seeds)


def exit_sample() -> None:
    now = _current.now
    now[_INDEX], now[_FRESH] = -1, False


def nest() -> tuple[Any, ...]:
    """Before a nested sample (a :class:`seekdata.Mixture` source, :func:`sample_scope`): what
    :func:`unnest` needs to give the outer sample back its context — and its stream where
    ``sample_rng()`` had already keyed it, since the nested sample re-keys the thread's one
    generator. Free when the outer sample drew nothing (a loader fetching a mixture)."""
    f = _current
    now = f.now
    index = now[_INDEX]
    if index >= 0:
        keyed = not now[_FRESH]
    elif index == _IN_BATCH:
        keyed = now[_AT] == len(now[_INDICES]) - now[_ITER].__length_hint__() - 1
    else:
        keyed = False
    stream = f.bitgen.state if keyed and f.bitgen is not None else None
    return f.seed, f.epoch, list(now), stream


def unnest(outer: tuple[Any, ...]) -> None:
    """After a nested sample: the outer sample's context and stream, as :func:`nest` saw them."""
    f = _current
    f.seed, f.epoch, f.now[:], stream = outer
    if stream is not None:
        f.bitgen.state = stream  # type: ignore[union-attr]  # set when the stream was saved
        f.key_for = (-1, -1)  # f.state holds the nested key: rewrite it at the next keying


def fetching() -> tuple[int, int] | None:
    """(seed, epoch) of the sample or batch this thread is fetching for a seekdata loader (or a
    :func:`enter_sample` scope); None outside one. A :class:`seekdata.Mixture` takes the
    loader's epoch from it."""
    f = _current
    return None if f.now[_INDEX] == -1 else (f.seed, f.epoch)


def reading() -> tuple[int, int] | None:
    """(seed, epoch) while the loader reads a batch with one ``dataset.__getitems__`` call in
    this thread (between :func:`enter_read` and :func:`exit_read`); None otherwise."""
    f = _current
    return (f.seed, f.epoch) if f.now[_INDEX] == _IN_READ else None


def mark_threaded() -> None:
    """This thread is a seekdata thread worker (``worker_method="thread"``): global RNG is every
    thread's, so nothing in it reseeds global RNG (the loader watches it instead)."""
    _current.threaded = True


def threaded() -> bool:
    """Whether this thread is a seekdata thread worker (:func:`mark_threaded`)."""
    return _current.threaded


def enter_read(seed: int, planned: Any) -> None:
    """The loader reads ``planned`` (epoch, batch, indices) with one ``dataset.__getitems__``
    call in this thread: :func:`sample_rng` is the batch's stream until :func:`exit_read`."""
    f = _current
    f.seed, f.epoch = seed, planned.epoch
    now = f.now
    now[_INDEX], now[_ITER], now[_INDICES] = _IN_READ, None, planned  # stream: at first use


def exit_read() -> None:
    now = _current.now
    now[_INDEX], now[_ITER], now[_INDICES] = -1, None, ()


def fetch_batch(
    out: list[Any],
    getitem: Callable[[int], Any],
    seed: int,
    epoch: int,
    indices: Sequence[int],
    reseed: tuple[str, ...],
) -> None:
    """Append ``getitem(index)`` for each of ``indices`` to ``out``, each sample current while
    it is fetched (:func:`sample_rng` at (seed, epoch, index)) and, for the generators in
    ``reseed``, global RNG seeded from its key (:func:`seekdata._core.rngkeys.seed_columns`).

    The loader's hot loop, one call per batch: a call per sample would cost a few % of it.
    Without reseeding it writes nothing per sample (``map`` in C; :func:`sample_rng` reads the
    index off the iterator). A ``StopIteration`` out of ``getitem`` ends the batch early without
    reseeding (``out`` is short by the rest) or propagates (with reseeding; ``out`` then holds
    the samples before it): either way ``indices[len(out)]`` is the sample that raised.
    """
    f = _current
    f.seed, f.epoch = seed, epoch
    now = f.now  # list items: far cheaper than thread-local attributes (see _Fetch)
    try:
        if not reseed:
            seq = iter(indices)
            now[_ITER], now[_INDICES], now[_AT], now[_INDEX] = seq, indices, -1, _IN_BATCH
            out.extend(map(getitem, seq))  # a StopIteration from getitem ends map() early
            return
        append = out.append
        torch_col, np_col, py_col = seed_columns(seed, epoch, indices)
        if reseed == _globalrng.GENERATORS:
            # seed_globals((a, b, c)), inlined: a call per sample costs ~2%
            torch_seed, np_seed, py_cseed, py_inst = _globalrng.inline_seeders()
            for index, a, b, c in zip(indices, torch_col, np_col, py_col, strict=True):
                now[_INDEX] = index
                now[_FRESH] = True
                torch_seed(a)
                np_seed(b)
                py_cseed(py_inst, c)
                py_inst.gauss_next = None
                append(getitem(index))
        else:
            # seed_globals(row, reseed), its calls made here: a call per sample costs a fifth
            cols = (torch_col, np_col, py_col)
            calls = [(seeder, cols[c]) for c, seeder in _globalrng.seeders(reseed)]
            for i, index in enumerate(indices):
                now[_INDEX] = index
                now[_FRESH] = True
                for seeder, column in calls:
                    seeder(column[i])
                append(getitem(index))
    finally:
        now[_INDEX], now[_FRESH], now[_ITER] = -1, False, None  # exit_sample(), inlined
