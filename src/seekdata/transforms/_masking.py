"""Masking operations: random erasing of a box (or span), random token masking."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from seekdata._core.checks import ArgumentError, is_int
from seekdata.transforms._arrays import (
    check_array,
    check_interval,
    check_layout,
    check_probability,
    check_real_dtype,
    copy,
    integer_range,
    is_floating,
    is_integer,
    spatial_axes,
    window,
)


class RandomErasing:
    """With probability ``p``, overwrite a random box of area fraction ``scale`` and aspect
    ratio ``ratio`` (log-uniform) with ``value`` on all channels; same sampling as
    torchvision (10 tries, else nothing is erased). On a 1-D sequence it erases a span of
    length fraction ``scale`` (``ratio`` unused).

    ``value`` is a number, or ``"random"``: standard normal values for float input,
    uniform integers in [0, dtype max] for integer input.
    """

    def __init__(
        self,
        p: float = 0.5,
        scale: tuple[float, float] = (0.02, 0.33),
        ratio: tuple[float, float] = (0.3, 3.3),
        value: float | str = 0.0,
        *,
        layout: str = "CHW",
    ) -> None:
        where = "RandomErasing"
        self.p = check_probability(p, "p", where)
        self.scale = check_interval(
            scale, "scale", where, low=0.0, high=1.0, example="(0.02, 0.33)"
        )
        self.ratio = check_interval(
            ratio, "ratio", where, low=0.0, open_low=True, example="(0.3, 3.3)"
        )
        if isinstance(value, str):
            if value != "random":
                raise ValueError(
                    f"{where}: value must be a number or 'random'; got {value!r}; "
                    "pass e.g. value=0.0"
                )
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(
                f"{where}: value must be a number or 'random'; got {type(value).__name__} "
                f"{value!r}; pass e.g. value=0.0"
            )
        self.value = value
        self.layout = check_layout(layout, where)
        self._log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))

    def _box(self, height: int, width: int, rng: np.random.Generator) -> tuple[int, ...] | None:
        (s0, s1), (r0, r1) = self.scale, self._log_ratio
        for _ in range(10):
            u, v = rng.random(2).tolist()
            target = height * width * (s0 + (s1 - s0) * u)
            aspect = math.exp(r0 + (r1 - r0) * v)
            h = round(math.sqrt(target * aspect))
            w = round(math.sqrt(target / aspect))
            if 0 < h < height and 0 < w < width:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return top, left, h, w
        return None

    def _span(self, length: int, rng: np.random.Generator) -> tuple[int, int] | None:
        s0, s1 = self.scale
        span = round(length * (s0 + (s1 - s0) * float(rng.random())))
        if not 0 < span < length:
            return None
        return int(rng.integers(0, length - span + 1)), span

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        where = "RandomErasing"
        check_array(x, where)
        check_real_dtype(x, where)
        if rng.random() >= self.p:
            return x
        axes: tuple[int, ...]
        starts: tuple[int, ...]
        sizes: tuple[int, ...]
        if x.ndim == 1:
            found = self._span(x.shape[0], rng)
            if found is None:
                return x
            axes, starts, sizes = (0,), found[:1], found[1:]
        else:
            axes = spatial_axes(x, self.layout, where)
            box = self._box(x.shape[axes[0]], x.shape[axes[1]], rng)
            if box is None:
                return x
            axes, starts, sizes = axes, box[:2], box[2:]
        index = window(x.ndim, axes, starts, [a + s for a, s in zip(starts, sizes, strict=True)])
        out = copy(x)
        if self.value == "random":
            shape = tuple(out[index].shape)
            if is_floating(x):
                fill: Any = rng.standard_normal(shape, dtype=np.float32)
            else:
                fill = rng.integers(0, integer_range(x)[1], size=shape, endpoint=True)
            if isinstance(out, torch.Tensor):
                fill = torch.from_numpy(fill)
            out[index] = fill
            return out
        value = float(self.value)
        if is_integer(x) and not integer_range(x)[0] <= value <= integer_range(x)[1]:
            raise ValueError(
                f"{where}: value {self.value} does not fit dtype {x.dtype} "
                f"{integer_range(x)}; pass a value in that range"
            )
        out[index] = self.value
        return out

    def __repr__(self) -> str:
        return (
            f"RandomErasing(p={self.p}, scale={self.scale}, ratio={self.ratio}, "
            f"value={self.value!r}, layout={self.layout!r})"
        )


class TokenMask:
    """Replace each token of an integer sequence by ``mask_token`` with probability ``p``,
    independently; tokens listed in ``keep`` (padding, special tokens) are never masked.

    Made for 1-D ``(L,)`` token ids; any shape works elementwise. One uniform is drawn per
    token, so the mask of token i depends only on the key and i.
    """

    def __init__(self, p: float, mask_token: int, *, keep: Iterable[int] = ()) -> None:
        where = "TokenMask"
        self.p = check_probability(p, "p", where)
        if not is_int(mask_token):
            raise ArgumentError(
                f"{where}: mask_token must be an int token id; got {type(mask_token).__name__} "
                f"{mask_token!r}; pass your tokenizer's mask id, e.g. mask_token=103"
            )
        self.mask_token = int(mask_token)
        keep = tuple(keep)
        if not all(is_int(t) for t in keep):
            raise ArgumentError(f"{where}: keep must hold int token ids; got {keep!r}")
        self.keep = tuple(int(t) for t in keep)

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        where = "TokenMask"
        check_array(x, where)
        if not is_integer(x):
            raise ArgumentError(
                f"{where}: needs integer token ids; got dtype {x.dtype}; pass the token id "
                "sequence (e.g. torch.long) before embedding"
            )
        low, high = integer_range(x)
        if not low <= self.mask_token <= high:
            raise ValueError(
                f"{where}: mask_token {self.mask_token} does not fit dtype {x.dtype} "
                f"[{low}, {high}]; use a wider dtype such as int64"
            )
        masked = rng.random(tuple(x.shape)) < self.p
        out = copy(x)
        if self.keep:
            masked &= ~np.isin(np.asarray(x), self.keep)
        out[torch.from_numpy(masked) if isinstance(x, torch.Tensor) else masked] = self.mask_token
        return out

    def __repr__(self) -> str:
        return f"TokenMask(p={self.p}, mask_token={self.mask_token}, keep={self.keep})"
