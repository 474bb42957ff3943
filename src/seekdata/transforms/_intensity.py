"""Value operations: Gaussian noise, brightness and contrast.

Value ranges: float images are taken to live in [0, 1] and integer images in
[0, dtype max] (255 for uint8), as in torchvision. Integer results are rounded and
clamped to their dtype's range; the output dtype is the input's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from seekdata.transforms._arrays import (
    as_tensor,
    channel_axis,
    check_array,
    check_interval,
    check_layout,
    check_nonnegative,
    check_real_dtype,
    is_integer,
    like_input,
    spatial_axes,
    value_bound,
    working_float,
)


class GaussianNoise:
    """Add ``mean + std × N(0, 1)`` noise elementwise; any shape (images, sequences).

    Noise is drawn in float32 (float64 for float64 input) with ``rng.standard_normal``.
    Float results are clamped to ``clip = (low, high)`` when given; integer results are
    rounded and clamped to the dtype's range (and to ``clip``), ``std`` in the dtype's units.
    """

    def __init__(
        self, std: float, *, mean: float = 0.0, clip: tuple[float, float] | None = None
    ) -> None:
        where = "GaussianNoise"
        self.std = check_nonnegative(std, "std", where)
        if isinstance(mean, bool) or not isinstance(mean, int | float):
            raise TypeError(f"{where}: mean must be a float; got {mean!r}; pass e.g. mean=0.0")
        self.mean = float(mean)
        self.clip = (
            None
            if clip is None
            else check_interval(clip, "clip", where, low=-float("inf"), example="(0.0, 1.0)")
        )

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        check_array(x, "GaussianNoise")
        check_real_dtype(x, "GaussianNoise")
        wide = x.dtype == (torch.float64 if isinstance(x, torch.Tensor) else np.float64)
        noise = rng.standard_normal(tuple(x.shape), dtype=np.float64 if wide else np.float32)
        low, high = self.clip if self.clip is not None else (None, None)
        if isinstance(x, np.ndarray) and not is_integer(x):
            out = x + (noise * self.std + self.mean).astype(x.dtype, copy=False)
            return out if low is None else np.clip(out, low, high, out=out)
        t = working_float(as_tensor(x)) + torch.from_numpy(noise).mul_(self.std).add_(self.mean)
        return like_input(t, x, low=low, high=high)

    def __repr__(self) -> str:
        return f"GaussianNoise(std={self.std}, mean={self.mean}, clip={self.clip})"


def _factors(value: Any, name: str, where: str) -> tuple[float, float]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return check_interval(value, name, where, low=0.0, example="(0.8, 1.2)")
    amount = check_nonnegative(value, name, where)
    return max(0.0, 1.0 - amount), 1.0 + amount


_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601, as torchvision's rgb_to_grayscale


class ColorJitter:
    """Scale brightness by ``b`` then blend with the mean grey level by contrast ``c``::

        y = clamp(b · x);  y = clamp(c · y + (1 − c) · mean(grey(y)))

    ``brightness``/``contrast`` are a float ``a`` (factor uniform in [max(0, 1 − a), 1 + a])
    or a pair ``(min, max)``. Grey uses ITU-R 601 weights for 3 channels, else the channel
    mean. Clamping is to [0, 1] for floats, [0, dtype max] for integers (see module doc).
    Both factors are always drawn, so setting one to 0 leaves the other's draw unchanged.
    """

    def __init__(
        self,
        brightness: float | tuple[float, float] = 0.0,
        contrast: float | tuple[float, float] = 0.0,
        *,
        layout: str = "CHW",
    ) -> None:
        self.brightness = _factors(brightness, "brightness", "ColorJitter")
        self.contrast = _factors(contrast, "contrast", "ColorJitter")
        self.layout = check_layout(layout, "ColorJitter")

    def __call__(self, x: Any, rng: np.random.Generator) -> Any:
        ah, aw = spatial_axes(x, self.layout, "ColorJitter")
        check_real_dtype(x, "ColorJitter")
        u, v = rng.random(2).tolist()
        (b0, b1), (c0, c1) = self.brightness, self.contrast
        b, c = b0 + (b1 - b0) * u, c0 + (c1 - c0) * v
        bound = value_bound(x)
        t = (working_float(as_tensor(x)) * b).clamp_(0.0, bound)
        ac = channel_axis(x, self.layout)
        if ac is None:
            grey = t
        elif t.shape[ac] == 3:
            weights = torch.tensor(_LUMA, dtype=t.dtype).reshape([3] + [1] * (t.ndim - 1 - ac))
            grey = (t * weights).sum(dim=ac, keepdim=True)
        else:
            grey = t.mean(dim=ac, keepdim=True)
        mean = grey.mean(dim=(ah, aw), keepdim=True)
        t = t.mul_(c).add_(mean * (1.0 - c)).clamp_(0.0, bound)
        return like_input(t, x)

    def __repr__(self) -> str:
        return (
            f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, "
            f"layout={self.layout!r})"
        )
