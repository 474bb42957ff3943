"""Counter-based randomness: every random number is a pure function of counters.

The rules
---------
Nothing random in seekdata is *stateful*. Each random decision is derived from a
tuple of counters with a counter-based generator (numpy ``Philox``); keys are
derived from the tuple with numpy ``SeedSequence`` (a hash), never by arithmetic
such as ``seed + epoch``.

========================================  ===============================
decision                                  counters
========================================  ===============================
epoch order: dataset index at position p  (seed, epoch, p)
a sample's augmentation randomness        (seed, epoch, dataset index)
a batch-level transform (mixup, cutmix)   (seed, epoch, global step)
model-side randomness (dropout, noise)    (seed, step, rank)
========================================  ===============================

The sample key leaves out rank and worker on purpose: the same sample gets the
same augmentation whichever rank or worker loads it, so world size and
``num_workers`` can change at resume without changing the data stream.

Data-side streams (order, sample, batch) carry a domain tag as their first
counter (:data:`ORDER`, :data:`SAMPLE`, :data:`BATCH`), so a sample key can never
collide with a user's own tuple such as ``(seed, step, rank)``.

Public entry points: :func:`numpy_generator` and :func:`torch_generator` for any
counter tuple; :func:`sample_generator` for a sample's stream outside a loader;
:func:`sample_rng` for the current sample's stream inside a loader's fetch.
"""

from __future__ import annotations

import _random
import functools
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from seekdata import _globalrng

__all__ = [
    "BATCH",
    "ORDER",
    "SAMPLE",
    "derive_key",
    "numpy_generator",
    "sample_generator",
    "sample_rng",
    "torch_generator",
]

#: Domain tag of epoch orders: keys are ``(seed, ORDER, epoch)``.
ORDER = 0x4F524452  # "ORDR"
#: Domain tag of per-sample streams: keys are ``(seed, SAMPLE, epoch)``, counter = index.
SAMPLE = 0x534D504C  # "SMPL"
#: Domain tag of batch-level streams: keys are ``(seed, BATCH, epoch, step)``.
BATCH = 0x42415443  # "BATC"

_U64 = np.uint64
_MASK64 = (1 << 64) - 1


def check_counter(value: Any, name: str, where: str) -> int:
    """Return ``value`` as a non-negative Python int or raise a STYLE-formula error."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(
            f"{where}: {name} must be a non-negative int; got {type(value).__name__} "
            f"{value!r}; pass an int such as {name}=0"
        )
    value = int(value)
    if value < 0:
        raise ValueError(
            f"{where}: {name} must be a non-negative int; got {value}; "
            f"pass {name} >= 0 (counters are hashed, so large values are fine)"
        )
    return value


def _check_tuple(seed: Any, counters: tuple[Any, ...], where: str) -> tuple[int, tuple[int, ...]]:
    seed = check_counter(seed, "seed", where)
    return seed, tuple(check_counter(c, f"counter {i}", where) for i, c in enumerate(counters))


@functools.lru_cache(maxsize=4096)
def _key_cached(seed: int, counters: tuple[int, ...], words: int) -> tuple[int, ...]:
    state = np.random.SeedSequence(seed, spawn_key=counters).generate_state(words, np.uint64)
    return tuple(int(w) for w in state)


def derive_key(seed: int, *counters: int, words: int = 2) -> tuple[int, ...]:
    """Hash ``(seed, *counters)`` into ``words`` 64-bit key words with ``SeedSequence``.

    Equal tuples give equal keys in any process; distinct tuples give
    independent keys. Results are cached, so per-epoch keys cost one hash.
    """
    seed, counters = _check_tuple(seed, counters, "derive_key")
    return _key_cached(seed, counters, words)


def numpy_generator(seed: int, *counters: int) -> np.random.Generator:
    """A ``numpy.random.Generator`` (Philox) whose stream is a pure function of the tuple.

    >>> a = numpy_generator(0, 3, 7).integers(0, 100, 4)
    >>> b = numpy_generator(0, 3, 7).integers(0, 100, 4)
    >>> bool((a == b).all())
    True
    """
    seed, counters = _check_tuple(seed, counters, "numpy_generator")
    key = np.array(_key_cached(seed, counters, 2), dtype=_U64)
    return np.random.Generator(np.random.Philox(key=key))


def torch_generator(
    seed: int, *counters: int, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from the hashed tuple.

    Use it for explicit model-side randomness, e.g. per-step noise:
    ``torch.randn(shape, generator=torch_generator(seed, step, rank))``.
    """
    seed, counters = _check_tuple(seed, counters, "torch_generator")
    generator = torch.Generator(device=device)
    generator.manual_seed(_key_cached(seed, counters, 2)[0])
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
    key = np.array(_key_cached(seed, (SAMPLE, epoch), 2), dtype=_U64)
    counter = np.array([0, 0, index, 0], dtype=_U64)
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


def _mix64(x: np.ndarray) -> np.ndarray:
    """A 64-bit finaliser (splitmix64) on uint64 arrays: a fast, well-mixing bijection."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def mix_keyed(key: tuple[int, ...], values: np.ndarray) -> np.ndarray:
    """Keyed pseudo-random function of uint64 ``values`` (vectorised): two mix rounds."""
    k0, k1 = _U64(key[0]), _U64(key[1])
    return _mix64(_mix64(values.astype(_U64, copy=False) ^ k0) ^ k1)


def _seeds_from(key: tuple[int, ...], values: np.ndarray) -> np.ndarray:
    """Three global-RNG seeds per value from a keyed hash ``h`` of it: torch's CPU generator
    and numpy's legacy RNG each keep 32 bits of a seed, so they take the two halves of ``h``;
    ``random`` (seeded from all 64 bits) takes ``h`` under another key word."""
    h = mix_keyed(key[:2], np.asarray(values, dtype=_U64))
    out = np.empty((h.shape[0], 3), dtype=_U64)
    out[:, 0] = h & _U64(0xFFFFFFFF)
    out[:, 1] = h >> _U64(32)
    out[:, 2] = h ^ _U64(key[2])
    return out


def global_seeds(seed: int, epoch: int, indices: np.ndarray) -> np.ndarray:
    """Seeds for torch, numpy-legacy and ``random`` global RNG, one row per sample.

    Keyed by (seed, SAMPLE, epoch) — one hash per epoch — then a keyed mix of each index:
    vectorised over a batch, a few µs for the whole batch.
    """
    return _seeds_from(_key_cached(seed, (SAMPLE, epoch), 4), indices)


_C = {name: np.array(value, dtype=_U64) for name, value in (  # 0-d: no scalar conversion per op
    ("s30", 30), ("s27", 27), ("s31", 31), ("s32", 32), ("low", 0xFFFFFFFF),
    ("m1", 0xBF58476D1CE4E5B9), ("m2", 0x94D049BB133111EB),
)}  # fmt: skip


@functools.lru_cache(maxsize=64)
def _sample_key_words(seed: int, epoch: int) -> tuple[np.ndarray, ...]:
    return tuple(np.array(w, dtype=_U64) for w in _key_cached(seed, (SAMPLE, epoch), 4)[:3])


def _mix64_into(x: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`_mix64` in place: the same bits, without an array allocated per operation."""
    rs, xor, mul, c = np.right_shift, np.bitwise_xor, np.multiply, _C
    xor(x, rs(x, c["s30"], out=scratch), out=x)
    mul(x, c["m1"], out=x)
    xor(x, rs(x, c["s27"], out=scratch), out=x)
    mul(x, c["m2"], out=x)
    xor(x, rs(x, c["s31"], out=scratch), out=x)


def seed_columns(seed: int, epoch: int, indices: Any) -> tuple[list[int], list[int], list[int]]:
    """The columns of :func:`global_seeds` as lists of Python ints (torch, numpy, ``random``):
    the loader's per-batch derivation, bit for bit the same, in about half the time."""
    k0, k1, k2 = _sample_key_words(seed, epoch)
    x = np.array(indices, dtype=_U64)
    scratch = np.empty_like(x)
    np.bitwise_xor(x, k0, out=x)
    _mix64_into(x, scratch)
    np.bitwise_xor(x, k1, out=x)
    _mix64_into(x, scratch)
    low = np.bitwise_and(x, _C["low"], out=scratch).tolist()
    high = np.right_shift(x, _C["s32"]).tolist()
    return low, high, np.bitwise_xor(x, k2, out=x).tolist()


def batch_seeds(seed: int, epoch: int, step: int, digest: int) -> list[int]:
    """Global-RNG seeds for a batch's collation: keyed by (seed, BATCH, epoch), then mixed
    with the step and the hash of the batch's indices (both 32-bit here)."""
    value = np.array([(step & 0xFFFFFFFF) << 32 | (digest & 0xFFFFFFFF)], dtype=_U64)
    return [int(w) for w in _seeds_from(_key_cached(seed, (BATCH, epoch), 4), value)[0]]


class _Fetch(threading.local):
    """The sample being fetched in this thread, if any: ``now`` is ``[index, fresh]`` (index -1
    outside a fetch; fresh until the sample's stream is keyed), a list because the loader's
    hot loop writes it per sample, and a list item costs a tenth of a thread-local attribute."""

    seed: int = -1
    epoch: int = -1
    bitgen: np.random.Philox | None = None
    generator: np.random.Generator | None = None
    state: Any = None  # the Philox state dict, mutated in place and assigned back
    key_for: tuple[int, int] = (-1, -1)

    def __init__(self) -> None:  # runs once in every thread that touches it
        self.now: list[Any] = [-1, False]


_fetch = _Fetch()


def sample_rng() -> np.random.Generator:
    """The current sample's ``numpy.random.Generator`` inside a seekdata fetch.

    Its stream is a pure function of (seed, epoch, dataset index): the same whichever
    worker or rank loads the sample. Calls within one fetch continue one stream. The
    object is reused between samples; do not keep it past ``__getitem__``.
    """
    f = _fetch
    now = f.now
    if now[0] < 0:
        raise RuntimeError(
            "sample_rng() must be called while a seekdata loader fetches a sample "
            "(inside dataset.__getitem__); it was called outside one. Outside a loader use "
            "seekdata.sample_generator(seed, epoch, index), or wrap the call in "
            "seekdata.rng.sample_scope(seed, epoch, index)"
        )
    if now[1]:
        if f.bitgen is None or f.state is None:
            f.bitgen = np.random.Philox(key=np.zeros(2, dtype=_U64))
            f.generator = np.random.Generator(f.bitgen)
            f.state = f.bitgen.state
        state: Any = f.state
        if f.key_for != (f.seed, f.epoch):
            state["state"]["key"] = np.array(_key_cached(f.seed, (SAMPLE, f.epoch), 2), _U64)
            f.key_for = (f.seed, f.epoch)
        counter = state["state"]["counter"]
        counter[:] = 0
        counter[2] = now[0]
        state["buffer_pos"] = 4  # discard buffered words of the previous sample
        state["has_uint32"] = 0
        f.bitgen.state = state
        now[1] = False
    return f.generator  # type: ignore[return-value]  # set on the first fresh call above


_torch_seed = torch.default_generator.manual_seed
_np_seed = np.random.seed
_py_inst: Any = getattr(random, "_inst")  # noqa: B009  # the instance behind random.random()
_py_cseed = _random.Random.seed  # its C seeding, without random.seed's Python wrapper


def _py_seed(value: int) -> None:
    """``random.seed(value)`` for an int, without the Python wrapper's ~1.5 µs."""
    _py_cseed(_py_inst, value)
    _py_inst.gauss_next = None  # what the wrapper also resets: gauss() must not carry over


def enter_sample(seed: int, epoch: int, index: int, seeds: list[int] | None) -> None:
    """Make (seed, epoch, index) the current sample; reseed global RNG from ``seeds``, a row of
    ``global_seeds(...).tolist()`` (Python ints: numpy scalars cost µs to convert).

    Internal hot path of the loader: no validation, about 9 µs with reseeding.
    """
    f = _fetch
    f.seed, f.epoch = seed, epoch
    f.now[:] = index, True
    if seeds is not None:
        _torch_seed(seeds[0])
        _np_seed(seeds[1])
        _py_seed(seeds[2])


def exit_sample() -> None:
    _fetch.now[:] = -1, False


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
    outer = (_fetch.seed, _fetch.epoch, *_fetch.now)
    seeds = global_seeds(seed, epoch, np.array([index])).tolist()[0] if reseed_global_rng else None
    try:
        enter_sample(seed, epoch, index, seeds)
        yield sample_rng()
    finally:
        _fetch.seed, _fetch.epoch = outer[:2]
        _fetch.now[:] = outer[2:]
        if saved is not None:
            restore_globals(saved)
