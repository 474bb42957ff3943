"""Epoch orders: pure functions ``(seed, epoch, position) -> dataset index``.

The public face is :mod:`seekdata.order`; its docstring is the user's guide to this module.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from seekdata._core import source as _source
from seekdata._core.checks import ArgumentError, is_int
from seekdata._core.rngkeys import ORDER, key_words, mix64_into, mix_keyed

__all__ = [
    "ORDERS",
    "Feistel",
    "Order",
    "Sequential",
    "Shards",
    "TorchRandperm",
    "feistel_index",
    "feistel_permute",
    "make_order",
]

ORDERS = ("feistel", "torch", "sequential", "shards")
_U64 = np.uint64
_ROUNDS = 8
#: cycle walking finishes in pure Python once this few elements are left (~3 µs a pass each,
#: against ~35 µs for a vectorised pass over any number)
_TAIL = 24
_SHARDS_TAG = 0x53484452  # "SHDR": shard-permutation keys, apart from within-window keys


class Order(Protocol):
    """What a sampler needs from an order."""

    @property
    def n(self) -> int:
        """The dataset length: the order is a bijection on ``[0, n)``."""
        ...

    def indices(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Dataset indices (int64) at ``positions`` (each in ``[0, n)``) of ``epoch``."""
        ...

    def spec(self) -> str:
        """A string that identifies the order and its parameters, stored in states."""
        ...


def _round_keys(seed: int, counters: tuple[int, ...]) -> np.ndarray:
    return np.array(key_words(seed, counters, _ROUNDS), dtype=_U64)


def feistel_permute(x: np.ndarray, n: np.ndarray | int, keys: np.ndarray) -> np.ndarray:
    """Keyed permutation of ``[0, n)`` applied to ``x`` (uint64), with cycle walking.

    ``n`` may be an array (one domain per element, e.g. one per shard window) and ``keys``
    then has shape ``(rounds, len(x))``; otherwise ``keys`` has shape ``(rounds,)``.
    """
    n_arr = np.asarray(n, dtype=_U64)
    if n_arr.ndim == 0:  # one domain: its parameters are Python ints (no per-call array math)
        bits = max((int(n_arr) - 1).bit_length(), 2)
        b_int = bits - (bits >> 1)  # right half, the larger
        a: Any = np.array(bits - b_int, dtype=_U64)
        b: Any = np.array(b_int, dtype=_U64)
        mask_a: Any = np.array((1 << (bits - b_int)) - 1, dtype=_U64)
        mask_b: Any = np.array((1 << b_int) - 1, dtype=_U64)
    else:
        bits = np.maximum(_bit_length(n_arr - _U64(1)), _U64(2))
        b = bits - (bits >> _U64(1))  # right half, the larger
        a = bits - b
        mask_a = (_U64(1) << a) - _U64(1)
        mask_b = (_U64(1) << b) - _U64(1)
    out = _feistel_once(x, a, b, mask_a, mask_b, keys)
    walk = np.flatnonzero(out >= n_arr)
    per = n_arr.ndim > 0  # one domain per element: select its parameters too
    while walk.size:  # cycle walking: the domain is < 2n, so ~1 extra pass on average
        if walk.size <= _TAIL and not per:  # a pass costs ~35 µs however few: finish in Python
            n_int, words = int(n_arr), [int(k) for k in keys]
            out[walk] = [_walk(int(v), n_int, words) for v in out[walk].tolist()]
            break
        a_s, b_s, ma, mb, n_s = (v[walk] if per else v for v in (a, b, mask_a, mask_b, n_arr))
        sub_keys = keys[:, walk] if keys.ndim == 2 else keys
        step = _feistel_once(out[walk], a_s, b_s, ma, mb, sub_keys)
        out[walk] = step
        walk = walk[step >= n_s]
    return out


def feistel_index(n: int, seed: int, epoch: int, x: int) -> int:
    """``Feistel(n, seed).indices(epoch, [x])[0]`` for one position, in pure Python: ~5 µs
    instead of numpy's ~150 µs on a one-element array (a Mixture locates one sample at a time;
    tested equal)."""
    if n == 1:
        return 0
    return _walk(x, n, key_words(seed, (ORDER, epoch), _ROUNDS))


def _walk(x: int, n: int, keys: Sequence[int]) -> int:
    """Apply the network to ``x`` until the result is below ``n`` (cycle walking), in pure
    Python: the scalar twin of :func:`feistel_permute` for one domain."""
    bits = max((n - 1).bit_length(), 2)
    b = bits - (bits >> 1)
    mask_a, mask_b = (1 << (bits - b)) - 1, (1 << b) - 1
    rounds = [(key, i % 2 == 0) for i, key in enumerate(keys)]
    m1, m2, m64 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, (1 << 64) - 1
    while True:  # cycle walking: the domain is < 2n
        left, right = x >> b, x & mask_b
        for key, even in rounds:  # rngkeys.mix64_int inlined: this loop is the per-sample cost
            v = (right if even else left) ^ key
            v ^= v >> 30
            v = (v * m1) & m64
            v ^= v >> 27
            v = (v * m2) & m64
            v ^= v >> 31
            if even:
                left ^= v & mask_a
            else:
                right ^= v & mask_b
        x = (left << b) | right
        if x < n:
            return x


def _bit_length(v: np.ndarray) -> np.ndarray:
    """Bit length of uint64 values (vectorised)."""
    v = np.asarray(v, dtype=_U64)
    out = np.zeros(v.shape, dtype=_U64)
    w = v.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        s = _U64(shift)
        big = w >= (_U64(1) << s)
        out[big] += s
        w[big] >>= s
    out[w > 0] += _U64(1)
    return out


def _feistel_once(
    x: np.ndarray, a: Any, b: Any, mask_a: Any, mask_b: Any, keys: np.ndarray
) -> np.ndarray:
    """One pass of the network over ``x``, in place on two halves and two scratch arrays (an
    allocation per operation costs as much as the operation on a batch-sized array)."""
    left = np.right_shift(x, b)
    right = np.bitwise_and(x, mask_b)
    t, scratch = np.empty_like(left), np.empty_like(left)
    for i in range(keys.shape[0]):
        src, dst, mask = (right, left, mask_a) if i % 2 == 0 else (left, right, mask_b)
        np.bitwise_xor(src, keys[i], out=t)
        mix64_into(t, scratch)
        np.bitwise_and(t, mask, out=t)
        np.bitwise_xor(dst, t, out=dst)
    np.left_shift(left, b, out=left)
    return np.bitwise_or(left, right, out=left)


def _positions(positions: Any, n: int) -> np.ndarray:
    p = np.asarray(positions)
    if p.dtype.kind not in "iu":
        raise TypeError(f"order: positions must be integers; got dtype {p.dtype}")
    if p.size and (int(p.min()) < 0 or int(p.max()) >= n):
        raise ValueError(
            f"order: positions must lie in [0, {n}); got range [{int(p.min())}, {int(p.max())}]"
        )
    return p.astype(_U64)


@dataclass(frozen=True)
class Feistel:
    """Keyed Feistel permutation with cycle walking (the default order)."""

    n: int
    seed: int = 0

    def indices(self, epoch: int, positions: Any) -> np.ndarray:
        p = _positions(positions, self.n)
        if self.n == 1:
            return np.zeros(p.shape, dtype=np.int64)
        keys = _round_keys(self.seed, (ORDER, epoch))
        return feistel_permute(p, self.n, keys).astype(np.int64)

    def spec(self) -> str:
        return "feistel"


@dataclass(frozen=True)
class Sequential:
    """Position p is dataset index p."""

    n: int

    def indices(self, epoch: int, positions: Any) -> np.ndarray:
        return _positions(positions, self.n).astype(np.int64)

    def spec(self) -> str:
        return "sequential"


@functools.lru_cache(maxsize=2)
def _randperm(n: int, torch_seed: int) -> np.ndarray:
    import torch  # here: the torch-free tools (seekdata inspect) import this module

    g = torch.Generator()
    g.manual_seed(torch_seed)
    return torch.randperm(n, generator=g).numpy()


@dataclass(frozen=True)
class TorchRandperm:
    """torch's DistributedSampler permutation, reproduced bit for bit. O(n) per epoch."""

    n: int
    seed: int = 0

    def indices(self, epoch: int, positions: Any) -> np.ndarray:
        p = _positions(positions, self.n)
        # torch's own rule, reproduced on purpose so runs started with torch can continue.
        perm = _randperm(self.n, self.seed + epoch)
        return perm[p.astype(np.int64)].astype(np.int64)

    def spec(self) -> str:
        return "torch"


@dataclass(frozen=True)
class Shards:
    """Shard-local order: shards permuted per epoch, samples permuted within windows.

    ``window`` consecutive shards (in the epoch's shard order) form one window; samples of a
    window are permuted among themselves, so a reader touches ``window`` shards at a time.
    """

    window: int = 4
    shard_sizes: tuple[int, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if not is_int(self.window):
            raise ArgumentError(f"Shards: window must be an int; got {type(self.window).__name__}")
        if self.window < 1:
            raise ValueError(
                f"Shards: window must be >= 1 shard; got {self.window}; pass 1 or more"
            )

    @property
    def n(self) -> int:
        return int(sum(self.shard_sizes))

    def bind(self, shard_sizes: Sequence[int], seed: int) -> Shards:
        sizes = tuple(int(s) for s in shard_sizes)
        if not sizes or min(sizes) < 0 or sum(sizes) == 0:
            raise ValueError(
                f"order='shards': shard_sizes must be non-negative with a positive total; "
                f"got {list(sizes)[:8]}...; pass a dataset of non-empty shards"
            )
        return Shards(self.window, sizes, seed)

    def indices(self, epoch: int, positions: Any) -> np.ndarray:
        p = _positions(positions, self.n)
        plan = _shard_plan(self.shard_sizes, self.window, self.seed, epoch)
        perm_starts, win_starts, win_sizes, starts_of_perm = plan
        w = np.searchsorted(win_starts, p, side="right") - 1
        offset = p - win_starts[w]
        keys = _window_keys(self.seed, epoch, w)
        q = feistel_permute(offset, win_sizes[w], keys) + win_starts[w]
        j = np.searchsorted(perm_starts, q, side="right") - 1
        return (starts_of_perm[j] + (q - perm_starts[j])).astype(np.int64)

    def spec(self) -> str:
        crc = zlib.crc32(np.asarray(self.shard_sizes, dtype=np.int64).tobytes())
        return f"shards(window={self.window},shards={len(self.shard_sizes)},sizes={crc:08x})"


@functools.lru_cache(maxsize=4)
def _shard_plan(
    sizes: tuple[int, ...], window: int, seed: int, epoch: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-epoch tables, O(shards): where each permuted shard and each window starts."""
    s = len(sizes)
    size_arr = np.asarray(sizes, dtype=_U64)
    shard_starts = np.concatenate([[0], np.cumsum(size_arr)[:-1]]).astype(_U64)
    if s == 1:
        perm = np.zeros(1, dtype=np.int64)
    else:
        keys = _round_keys(seed, (ORDER, epoch, _SHARDS_TAG))
        perm = feistel_permute(np.arange(s, dtype=_U64), s, keys).astype(np.int64)
    perm_sizes = size_arr[perm]
    perm_starts = np.concatenate([[0], np.cumsum(perm_sizes)[:-1]]).astype(_U64)
    first = np.arange(0, s, window)
    win_starts = perm_starts[first]
    win_sizes = np.add.reduceat(perm_sizes, first).astype(_U64)
    # empty shards make empty windows possible; they are never selected (searchsorted
    # lands on the last window with that start), but keep their size >= 1 for the maths
    win_sizes = np.maximum(win_sizes, _U64(1))
    return perm_starts, win_starts, win_sizes, shard_starts[perm]


def _window_keys(seed: int, epoch: int, windows: np.ndarray) -> np.ndarray:
    """Round keys per shard window: window w's round i is mix_keyed((k0, k1 ^ i), w) under
    the epoch's order key (k0, k1)."""
    k0, k1 = key_words(seed, (ORDER, epoch), 2)
    w = windows.astype(_U64)
    return np.stack([mix_keyed((k0, k1 ^ i), w) for i in range(_ROUNDS)])


def make_order(
    order: Any, n: int, seed: int, *, shuffle: bool = True, dataset: Any = None
) -> Order:
    """Build an order from its name (or an :class:`Order` object), validating both."""
    where = "order"
    if not shuffle:
        return Sequential(n)
    if isinstance(order, Shards):
        spec: Any = order
    elif isinstance(order, str):
        if order not in ORDERS:
            raise ValueError(
                f"{where}: order must be one of {', '.join(map(repr, ORDERS))}; got {order!r}; "
                f"use 'feistel' (default) unless you must match torch ('torch')"
            )
        spec = Shards() if order == "shards" else order
    else:
        raise TypeError(
            f"{where}: order must be a str or seekdata.order.Shards; got {type(order).__name__}"
        )
    if spec == "feistel":
        return Feistel(n, seed)
    if spec == "torch":
        return TorchRandperm(n, seed)
    if spec == "sequential":
        return Sequential(n)
    sizes = _source.shard_sizes(dataset)
    if sizes is None:
        raise ValueError(
            f"{where}: order='shards' needs a dataset with shard_sizes (samples per shard, e.g. "
            f"seekdata.wds.TarShards, ParquetRows, TokenWindows(..., shard_windows=4096)); got "
            f"{type(dataset).__name__} without it; cut it into shards, or use order='feistel'"
        )
    bound = spec.bind(sizes, seed)
    if bound.n != n:
        raise ValueError(
            f"{where}: the dataset's shard_sizes add up to {bound.n} but len(dataset) is {n}; "
            f"they must agree; rebuild the shard index"
        )
    return bound
