"""Composition on explicit streams: Compose, RandomApply, RandomChoice.

How a step's stream is derived
------------------------------
When a :class:`Compose` starts it captures its generator's Philox key and counter
``(c0, c1, c2, c3)`` and advances that generator by one block, so a second pipeline applied
to the same generator (a second view of one image) gets different streams. Step ``s``
then runs on Philox with the same key and counter ``(0, 0, c2, w)`` where::

    w = chain(c3, c0, c1, step id)        # splitmix64 absorbing each 64-bit word in turn

The step id is ``position + 1``, or a hash of the step's name when the steps are given as
a mapping. ``c2`` is the sample's index and ``c3`` is 0 on a sample stream, so a step's
stream is a pure function of (seed, epoch, index, path of step ids) and never overlaps the
sample stream (``c3 = 0``) or a sibling's. A nested Compose hashes its own step ids onto
its parent's ``w``: its path.

``Generator.spawn`` is not used: a Philox built with ``key=`` carries a ``SeedSequence``
with fresh OS entropy, so spawned children would differ between runs. One Philox object is
kept per nesting depth per thread and reset (about 1 µs) instead of built (about 16 µs).

A generator whose bit generator is not Philox (say ``numpy.random.default_rng(0)``)
gives a Philox key drawn from it instead (two 64-bit draws, about 3 µs more, advancing it).
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from seekdata._core.rngkeys import splitmix64
from seekdata.transforms._arrays import (
    check_callable,
    check_generator,
    check_nonnegative,
    check_probability,
)

#: A transform: ``(sample, rng) -> sample`` with ``rng`` a ``numpy.random.Generator``.
Transform = Callable[[Any, np.random.Generator], Any]

_M64 = (1 << 64) - 1
_STEP_TAG = 0x5345454B53544550  # "SEEKSTEP": domain of step words
_CACHE_LIMIT = 256


def step_words(c3: int, c0: int, c1: int, step_ids: Sequence[int]) -> tuple[int, ...]:
    """Fourth counter words of the steps of a Compose captured at counter (c0, c1, _, c3)."""
    h = splitmix64(splitmix64(splitmix64(c3 ^ _STEP_TAG) ^ c0) ^ c1)
    return tuple(splitmix64(h ^ s) or 1 for s in step_ids)  # 0 is the sample stream's word


def name_id(name: str) -> int:
    """Step id of a named step: stable across processes (unlike ``hash``)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8, person=b"seekdata.step")
    return int.from_bytes(digest.digest(), "little")


def capture(rng: np.random.Generator) -> tuple[np.ndarray, int, int, int, int]:
    """Key and counter words ``(key, c0, c1, c2, c3)`` of ``rng``; advances ``rng`` one block."""
    bitgen = rng.bit_generator
    if isinstance(bitgen, np.random.Philox):
        state = bitgen.state
        inner = state["state"]
        counter = inner["counter"]
        c0, c1, c2, c3 = counter.tolist()
        if c0 < _M64:
            counter[0] = c0 + 1
        else:  # carry: 2**64 blocks drawn, never in practice
            total = (c0 | c1 << 64 | c2 << 128 | c3 << 192) + 1
            counter[:] = [(total >> shift) & _M64 for shift in (0, 64, 128, 192)]
        state["buffer_pos"] = 4  # the next draw starts a new block
        state["has_uint32"] = 0
        bitgen.state = state
        return inner["key"], c0, c1, c2, c3
    key = rng.integers(0, _M64, size=2, dtype=np.uint64, endpoint=True)
    return key, 0, 0, 0, 0


class _Slot:
    """A reusable Philox generator for one nesting depth."""

    def __init__(self) -> None:
        self.bitgen = np.random.Philox(key=np.zeros(2, dtype=np.uint64))
        self.generator = np.random.Generator(self.bitgen)
        self.state = self.bitgen.state
        self.state["buffer_pos"] = 4  # never read back, so every reset starts a fresh block
        self.state["has_uint32"] = 0


class _Scratch(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.slots: list[_Slot] = []


_scratch = _Scratch()


class Compose:
    """Apply transforms in order, each on its own sub-stream of ``rng``.

    ``transforms`` is a sequence (step ids are positions) or a mapping name -> transform
    (step ids hash the names). A step's randomness depends only on the stream ``rng`` is
    at and on its id: appending a step leaves the others unchanged; with names, inserting
    one anywhere does too. The ``rng`` handed to a step is reused for the next step: use
    it during the call only.
    """

    def __init__(self, transforms: Sequence[Transform] | Mapping[str, Transform]) -> None:
        where = "Compose"
        if isinstance(transforms, Mapping):
            for name in transforms:
                if not isinstance(name, str):
                    raise TypeError(
                        f"{where}: step names must be str; got {type(name).__name__} "
                        f"{name!r}; pass e.g. Compose({{'crop': RandomCrop(32)}})"
                    )
            self.names: tuple[str, ...] | None = tuple(transforms)
            steps = tuple(transforms.values())
            ids = tuple(name_id(name) for name in transforms)
        elif isinstance(transforms, Sequence) and not isinstance(transforms, str):
            self.names = None
            steps = tuple(transforms)
            ids = tuple(range(1, len(steps) + 1))
        else:
            raise TypeError(
                f"{where}: transforms must be a list of transforms or a dict name -> "
                f"transform; got {type(transforms).__name__}; pass e.g. "
                "Compose([RandomCrop(32), RandomHorizontalFlip(0.5)])"
            )
        for position, step in enumerate(steps):
            check_callable(step, f"step {position}", where)
        self.transforms: tuple[Transform, ...] = steps
        self._ids = ids
        self._words: dict[tuple[int, int, int], tuple[int, ...]] = {}

    def __call__(self, sample: Any, rng: np.random.Generator) -> Any:
        check_generator(rng, "Compose")
        key, c0, c1, c2, c3 = capture(rng)
        words = self._words.get((c3, c0, c1))
        if words is None:
            if len(self._words) >= _CACHE_LIMIT:
                self._words.clear()
            words = self._words[(c3, c0, c1)] = step_words(c3, c0, c1, self._ids)
        scratch = _scratch
        depth = scratch.depth
        if depth == len(scratch.slots):
            scratch.slots.append(_Slot())
        slot = scratch.slots[depth]
        state, bitgen, generator = slot.state, slot.bitgen, slot.generator
        inner = state["state"]
        inner["key"][:] = key
        counter = inner["counter"]
        counter[0] = 0
        counter[1] = 0
        counter[2] = c2
        scratch.depth = depth + 1
        try:
            for step, word in zip(self.transforms, words, strict=True):
                counter[3] = word
                bitgen.state = state
                sample = step(sample, generator)
        finally:
            scratch.depth = depth
        return sample

    def __repr__(self) -> str:
        if self.names is None:
            body = ", ".join(repr(t) for t in self.transforms)
            return f"Compose([{body}])"
        body = ", ".join(f"{n!r}: {t!r}" for n, t in zip(self.names, self.transforms, strict=True))
        return f"Compose({{{body}}})"


class RandomApply:
    """Apply ``transform`` with probability ``p``.

    Draws one uniform from ``rng`` first (always, so changing ``p`` does not shift the
    stream), then hands the same ``rng`` on to ``transform``.
    """

    def __init__(self, transform: Transform, p: float = 0.5) -> None:
        if isinstance(transform, Sequence) and not isinstance(transform, str):
            raise TypeError(
                "RandomApply: transform must be one callable; got a "
                f"{type(transform).__name__}; wrap several in Compose([...]) first"
            )
        check_callable(transform, "transform", "RandomApply")
        self.transform = transform
        self.p = check_probability(p, "p", "RandomApply")

    def __call__(self, sample: Any, rng: np.random.Generator) -> Any:
        if rng.random() < self.p:
            return self.transform(sample, rng)
        return sample

    def __repr__(self) -> str:
        return f"RandomApply({self.transform!r}, p={self.p})"


class RandomChoice:
    """Apply one of ``transforms``, picked with weights ``p`` (uniform when None).

    ``p`` is normalised to sum to 1, as in torchvision. One uniform is drawn from ``rng``
    for the pick, then the same ``rng`` goes to the picked transform.
    """

    def __init__(self, transforms: Sequence[Transform], p: Sequence[float] | None = None) -> None:
        where = "RandomChoice"
        if not isinstance(transforms, Sequence) or isinstance(transforms, str):
            raise TypeError(
                f"{where}: transforms must be a list of transforms; got "
                f"{type(transforms).__name__}; pass e.g. RandomChoice([MixUp(1.0), CutMix(1.0)])"
            )
        if len(transforms) == 0:
            raise ValueError(f"{where}: transforms must not be empty; pass at least one transform")
        for position, step in enumerate(transforms):
            check_callable(step, f"transform {position}", where)
        self.transforms = tuple(transforms)
        if p is None:
            weights = [1.0] * len(self.transforms)
        else:
            if not isinstance(p, Sequence) or isinstance(p, str):
                raise TypeError(
                    f"{where}: p must be a list of weights or None; got {type(p).__name__}; "
                    "pass e.g. p=[0.5, 0.5]"
                )
            if len(p) != len(self.transforms):
                raise ValueError(
                    f"{where}: p must have one weight per transform ({len(self.transforms)}); "
                    f"got {len(p)}; pass a list of {len(self.transforms)} weights"
                )
            weights = [check_nonnegative(w, f"p[{i}]", where) for i, w in enumerate(p)]
            if sum(weights) <= 0.0:
                raise ValueError(
                    f"{where}: p must have a positive weight; got {list(p)!r}; "
                    "pass e.g. p=[0.5, 0.5]"
                )
        total = sum(weights)
        self.p = tuple(w / total for w in weights)
        self._cumulative = list(np.cumsum(self.p).tolist())
        self._last = max(i for i, w in enumerate(weights) if w > 0)

    def __call__(self, sample: Any, rng: np.random.Generator) -> Any:
        pick = min(bisect.bisect_right(self._cumulative, rng.random()), self._last)
        return self.transforms[pick](sample, rng)

    def __repr__(self) -> str:
        return f"RandomChoice({list(self.transforms)!r}, p={list(self.p)!r})"
