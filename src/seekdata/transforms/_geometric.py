"""Geometric operations: crops, resized crops, flips, quarter turns.

Images are ``(H, W)``, ``(..., C, H, W)`` (``layout="CHW"``, the default) or
``(..., H, W, C)`` (``layout="HWC"``); leading dimensions share one draw. Where noted, a
1-D sequence ``(L,)`` is accepted too. Outputs are new contiguous arrays of the input's
kind and dtype; the input is never modified, and is returned as is when no change is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from seekdata._core.checks import ArgumentError, is_int
from seekdata.transforms._arrays import (
    as_tensor,
    check_array,
    check_interval,
    check_layout,
    check_probability,
    check_size,
    contiguous,
    like_input,
    spatial_axes,
    window,
    working_float,
)


def _pad(x: Any, axes: Sequence[int], amounts: Sequence[int], fill: float) -> Any:
    if not any(amounts):
        return x
    if isinstance(x, torch.Tensor):
        pad: list[int] = []
        for axis in range(x.ndim - 1, min(axes) - 1, -1):  # F.pad lists the last axis first
            amount = amounts[list(axes).index(axis)] if axis in axes else 0
            pad += [amount, amount]
        return F.pad(x, pad, mode="constant", value=fill)
    widths = [(0, 0)] * x.ndim
    for axis, amount in zip(axes, amounts, strict=True):
        widths[axis] = (amount, amount)
    return np.pad(x, widths, mode="constant", constant_values=fill)


class RandomCrop:
    """Crop a random ``size`` window, after padding each spatial side by ``padding``.

    ``size`` is an int (square, or the length of a 1-D sequence) or ``(height, width)``;
    ``padding`` an int or ``(pad_h, pad_w)``, filled with ``fill``. Accepts images and
    1-D sequences. Raises ValueError when the (padded) input is smaller than ``size``.
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        padding: int | tuple[int, int] = 0,
        *,
        fill: float = 0,
        layout: str = "CHW",
    ) -> None:
        where = "RandomCrop"
        self.size = check_size(size, "size", where)
        self._square = not isinstance(size, Sequence)
        if is_int(padding):
            padding = (int(padding), int(padding))
        if (
            not isinstance(padding, Sequence)
            or len(padding) != 2
            or not all(is_int(v) for v in padding)
        ):
            raise ArgumentError(
                f"{where}: padding must be an int or a pair of ints; got {padding!r}; "
                "pass e.g. padding=4"
            )
        if min(padding) < 0:
            raise ValueError(f"{where}: padding must be >= 0; got {padding!r}; pass e.g. padding=4")
        self.padding = (int(padding[0]), int(padding[1]))
        self.fill = fill
        self.layout = check_layout(layout, where)

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        where = "RandomCrop"
        check_array(x, where)
        if x.ndim == 1:
            if not self._square:
                raise ValueError(
                    f"{where}: a 1-D sequence needs an int size; got size={self.size}; "
                    "pass e.g. RandomCrop(128)"
                )
            axes: tuple[int, ...] = (0,)
            sizes: tuple[int, ...] = self.size[:1]
            pads: tuple[int, ...] = self.padding[:1]
        else:
            axes, sizes, pads = spatial_axes(x, self.layout, where), self.size, self.padding
        have = [x.shape[a] + 2 * p for a, p in zip(axes, pads, strict=True)]
        if any(s > h for s, h in zip(sizes, have, strict=True)):
            raise ValueError(
                f"{where}: crop size {tuple(sizes)} must fit in the padded input "
                f"{tuple(have)} (shape {tuple(x.shape)}, padding {tuple(pads)}); pass a "
                "smaller size or more padding"
            )
        starts = [int(rng.integers(0, h - s + 1)) for h, s in zip(have, sizes, strict=True)]
        padded = _pad(x, axes, pads, self.fill)
        stops = [a + s for a, s in zip(starts, sizes, strict=True)]
        return contiguous(padded[window(x.ndim, axes, starts, stops)])

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size}, padding={self.padding}, layout={self.layout!r})"


class RandomResizedCrop:
    """Crop a random area fraction ``scale`` with aspect ratio in ``ratio`` (log-uniform),
    then resize it to ``size`` with bilinear ``torch.nn.functional.interpolate``
    (``align_corners=False``, no antialias). Same sampling as torchvision: 10 tries, then
    a centre crop. Integer images are rounded and clamped to their dtype's range.
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        *,
        layout: str = "CHW",
    ) -> None:
        where = "RandomResizedCrop"
        self.size = check_size(size, "size", where)
        self.scale = check_interval(scale, "scale", where, low=0.0, high=1.0, example="(0.08, 1.0)")
        if self.scale[1] == 0.0:
            raise ValueError(f"{where}: scale must not be (0, 0); pass e.g. scale=(0.08, 1.0)")
        self.ratio = check_interval(
            ratio, "ratio", where, low=0.0, open_low=True, example="(3 / 4, 4 / 3)"
        )
        self.layout = check_layout(layout, where)
        self._log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))

    def box(self, height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
        """Draw ``(top, left, h, w)`` of the crop on a ``height`` × ``width`` image."""
        area = height * width
        (s0, s1), (r0, r1) = self.scale, self._log_ratio
        for _ in range(10):
            u, v = rng.random(2).tolist()
            target = area * (s0 + (s1 - s0) * u)
            aspect = math.exp(r0 + (r1 - r0) * v)
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return top, left, h, w
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            h, w = height, round(height * self.ratio[1])
        else:
            h, w = height, width
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        ah, aw = spatial_axes(x, self.layout, "RandomResizedCrop")
        top, left, h, w = self.box(x.shape[ah], x.shape[aw], rng)
        crop = x[window(x.ndim, (ah, aw), (top, left), (top + h, left + w))]
        if (h, w) == self.size:
            return contiguous(crop)
        t = working_float(as_tensor(crop))
        if self.layout == "HWC" and t.ndim >= 3:
            t = t.movedim(-1, -3)
        lead = t.shape[:-2]
        t = t.reshape(1, -1, h, w)
        t = F.interpolate(t, size=self.size, mode="bilinear", align_corners=False)
        t = t.reshape(*lead, *self.size)
        if self.layout == "HWC" and t.ndim >= 3:
            t = t.movedim(-3, -1)
        return like_input(t.contiguous(), x)

    def __repr__(self) -> str:
        return (
            f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
            f"layout={self.layout!r})"
        )


def _flip(x: Any, axis: int) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.flip(x, (axis,))
    return np.ascontiguousarray(np.flip(x, axis))


class RandomHorizontalFlip:
    """Reverse the width axis with probability ``p`` (a 1-D sequence: reverse it)."""

    def __init__(self, p: float = 0.5, *, layout: str = "CHW") -> None:
        self.p = check_probability(p, "p", "RandomHorizontalFlip")
        self.layout = check_layout(layout, "RandomHorizontalFlip")

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        check_array(x, "RandomHorizontalFlip")
        axis = 0 if x.ndim == 1 else spatial_axes(x, self.layout, "RandomHorizontalFlip")[1]
        return _flip(x, axis) if rng.random() < self.p else x

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p}, layout={self.layout!r})"


class RandomVerticalFlip:
    """Reverse the height axis with probability ``p``. Images only."""

    def __init__(self, p: float = 0.5, *, layout: str = "CHW") -> None:
        self.p = check_probability(p, "p", "RandomVerticalFlip")
        self.layout = check_layout(layout, "RandomVerticalFlip")

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        axis = spatial_axes(x, self.layout, "RandomVerticalFlip")[0]
        return _flip(x, axis) if rng.random() < self.p else x

    def __repr__(self) -> str:
        return f"RandomVerticalFlip(p={self.p}, layout={self.layout!r})"


class RandomRotation90:
    """With probability ``p``, rotate by ``90° × k`` counter-clockwise (as ``numpy.rot90``
    on the (H, W) plane), ``k`` drawn uniformly from ``k``. The default picks one of the
    four rotations uniformly. Odd ``k`` swaps H and W, so batch only square images.
    """

    def __init__(
        self, p: float = 1.0, k: Sequence[int] = (0, 1, 2, 3), *, layout: str = "CHW"
    ) -> None:
        where = "RandomRotation90"
        self.p = check_probability(p, "p", where)
        if not isinstance(k, Sequence) or len(k) == 0 or not all(is_int(v) for v in k):
            raise ArgumentError(
                f"{where}: k must be a non-empty list of ints in 0..3; got {k!r}; "
                "pass e.g. k=(1, 3)"
            )
        if not all(0 <= v <= 3 for v in k):
            raise ValueError(
                f"{where}: k must hold quarter turns in 0..3; got {k!r}; pass e.g. k=(1, 3)"
            )
        self.k = tuple(int(v) for v in k)
        self.layout = check_layout(layout, where)

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        axes = spatial_axes(x, self.layout, "RandomRotation90")
        u, v = rng.random(2).tolist()
        k = self.k[min(int(v * len(self.k)), len(self.k) - 1)]
        if u >= self.p or k == 0:
            return x
        if isinstance(x, torch.Tensor):
            return torch.rot90(x, k, axes).contiguous()
        return np.ascontiguousarray(np.rot90(x, k, axes))

    def __repr__(self) -> str:
        return f"RandomRotation90(p={self.p}, k={self.k}, layout={self.layout!r})"
