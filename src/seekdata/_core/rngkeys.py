"""Key derivation, the machinery behind :mod:`seekdata.rng` (which re-exports every name
here): the one key primitive (:func:`key_words`, a cached ``SeedSequence`` hash of a counter
tuple), the mixing functions that spread a key over many elements, and the global-RNG seed
rows of samples and batches. Pure functions of integers.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from seekdata._core.checks import check_counter

#: Domain tag of epoch orders: keys are ``(seed, ORDER, epoch)``.
ORDER = 0x4F524452  # "ORDR"
#: Domain tag of per-sample streams: keys are ``(seed, SAMPLE, epoch)``, counter = index.
SAMPLE = 0x534D504C  # "SMPL"
#: Domain tag of batch-level streams: keys are ``(seed, BATCH, epoch, step, digest)``.
BATCH = 0x42415443  # "BATC"
#: Domain tag of a loader's model-side step RNG: the seed of epoch ``e`` is ``(seed, STEP, e)``.
STEP = 0x53544550  # "STEP"
#: Domain tag of a batched read (``dataset.__getitems__``): keys are ``(seed, READ, epoch)``,
#: mixed with the batch's step and the digest of its indices.
READ = 0x52454144  # "READ"


_U64 = np.uint64
_M64 = (1 << 64) - 1


def check_tuple(seed: Any, counters: tuple[Any, ...], where: str) -> tuple[int, tuple[int, ...]]:
    seed = check_counter(seed, "seed", where)
    return seed, tuple(check_counter(c, f"counter {i}", where) for i, c in enumerate(counters))


# --- the key primitive --------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def key_words(seed: int, counters: tuple[int, ...], words: int) -> tuple[int, ...]:
    """:func:`derive_key` without validation, for callers whose counters are already checked:
    ``words`` 64-bit words of ``SeedSequence(seed, spawn_key=counters)``, cached."""
    state = np.random.SeedSequence(seed, spawn_key=counters).generate_state(words, np.uint64)
    return tuple(int(w) for w in state)


def derive_key(seed: int, *counters: int, words: int = 2) -> tuple[int, ...]:
    """Hash ``(seed, *counters)`` into ``words`` 64-bit key words with ``SeedSequence``.

    Equal tuples give equal keys in any process; distinct tuples give
    independent keys. Results are cached, so per-epoch keys cost one hash.
    """
    seed, counters = check_tuple(seed, counters, "derive_key")
    return key_words(seed, counters, words)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays: a fast, well-mixing bijection."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def mix64_int(x: int) -> int:
    """:func:`mix64` on one Python int (< 2**64): the same bits, without numpy."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def splitmix64(x: int) -> int:
    """One splitmix64 step on a Python int: :func:`mix64_int` of ``x`` plus the golden gamma."""
    return mix64_int((x + 0x9E3779B97F4A7C15) & _M64)


def mix_keyed(key: Sequence[int], values: np.ndarray) -> np.ndarray:
    """Keyed pseudo-random function of uint64 ``values`` (vectorised): two mix rounds,
    ``mix64(mix64(v ^ key[0]) ^ key[1])``."""
    k0, k1 = _U64(key[0]), _U64(key[1])
    return mix64(mix64(values.astype(_U64, copy=False) ^ k0) ^ k1)


# --- global-RNG seed rows ---------------------------------------------------------------------


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
    return _seeds_from(key_words(seed, (SAMPLE, epoch), 4), indices)


def _row(key: tuple[int, ...], value: int) -> list[int]:
    """:func:`_seeds_from` of one value, in pure Python: the same bits, without numpy's
    per-call cost (a few µs on a one-element array)."""
    h = mix64_int(mix64_int(value ^ key[0]) ^ key[1])
    return [h & 0xFFFFFFFF, h >> 32, h ^ key[2]]


def sample_seeds(seed: int, epoch: int, index: int) -> list[int]:
    """``global_seeds(seed, epoch, [index])[0]`` for one index, in pure Python (a
    :class:`seekdata.Mixture` reseeds one sample at a time): the same bits."""
    return _row(key_words(seed, (SAMPLE, epoch), 4), index)


_C = {name: np.array(value, dtype=_U64) for name, value in (  # 0-d: no scalar conversion per op
    ("s30", 30), ("s27", 27), ("s31", 31), ("s32", 32), ("low", 0xFFFFFFFF),
    ("m1", 0xBF58476D1CE4E5B9), ("m2", 0x94D049BB133111EB),
)}  # fmt: skip


@functools.lru_cache(maxsize=64)
def _sample_key_words(seed: int, epoch: int) -> tuple[np.ndarray, ...]:
    return tuple(np.array(w, dtype=_U64) for w in key_words(seed, (SAMPLE, epoch), 4)[:3])


def mix64_into(x: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`mix64` in place: the same bits, without an array allocated per operation."""
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
    mix64_into(x, scratch)
    np.bitwise_xor(x, k1, out=x)
    mix64_into(x, scratch)
    low = np.bitwise_and(x, _C["low"], out=scratch).tolist()
    high = np.right_shift(x, _C["s32"]).tolist()
    return low, high, np.bitwise_xor(x, k2, out=x).tolist()


@functools.lru_cache(maxsize=16)
def _packer(count: int) -> struct.Struct:
    return struct.Struct(f"={count}q")  # native order, 8-byte ints: numpy's int64 bytes


def _digest(indices: Any) -> int:
    """crc32 of a batch's indices as int64 bytes (whatever a bulk sampler yields: of its repr).
    A tuple of ints (the loader's own batches) is packed by ``struct``, in a fifth of numpy's
    time."""
    if type(indices) is tuple:
        try:
            return zlib.crc32(_packer(len(indices)).pack(*indices))
        except struct.error:  # not ints, or out of range: numpy says which
            pass
    try:
        return zlib.crc32(np.asarray(indices, dtype=np.int64).tobytes())
    except (TypeError, ValueError):
        return zlib.crc32(repr(indices).encode())


def batch_counters(epoch: int, step: int, indices: Any) -> tuple[int, int, int, int]:
    """The counters after the seed of a batch's stream: (BATCH, epoch, step, digest of the
    indices). The indices enter as a hash, so ranks at the same step draw differently, and
    the draw is a function of the batch's content rather than of the world size."""
    return BATCH, epoch, step, _digest(indices)


def step_seed(seed: int, epoch: int) -> int:
    """The seed a loader passes to ``set_step_rng`` for the steps of ``epoch`` (``step_rng``):
    the first word of the key (seed, STEP, epoch), 63 bits (a valid counter anywhere)."""
    return key_words(seed, (STEP, epoch), 1)[0] >> 1


def batch_seeds(seed: int, epoch: int, step: int, digest: int) -> list[int]:
    """Global-RNG seeds for a batch's collation: keyed by (seed, BATCH, epoch), then mixed
    with the step and the hash of the batch's indices (both 32-bit here)."""
    return _row(key_words(seed, (BATCH, epoch), 4), _step_digest(step, digest))


def read_seeds(seed: int, epoch: int, step: int, digest: int) -> list[int]:
    """Global-RNG seeds for a batched read (``dataset.__getitems__``): :func:`batch_seeds`'
    derivation under the key (seed, READ, epoch), so a collate function that draws does not
    repeat the read's numbers."""
    return _row(key_words(seed, (READ, epoch), 4), _step_digest(step, digest))


def read_counter(step: int, digest: int) -> list[int]:
    """The Philox counter of a batched read's stream under the key (seed, READ, epoch):
    ``(0, step, digest, 0)``; the first word counts the stream's blocks."""
    return [0, step & _M64, digest & _M64, 0]


def _step_digest(step: int, digest: int) -> int:
    return (step & 0xFFFFFFFF) << 32 | (digest & 0xFFFFFFFF)
