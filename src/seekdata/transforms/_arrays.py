"""Shared helpers of the transforms: argument checks, array kinds, layouts and dtypes.

Every operation accepts a ``numpy.ndarray`` or a ``torch.Tensor`` and returns the same
kind. Compute-heavy operations work on a zero-copy ``torch`` view of numpy input
(:func:`as_tensor`) and hand back a numpy array (:func:`like_input`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from seekdata._core.checks import check_int

LAYOUTS = ("CHW", "HWC")


# --- argument checks (STYLE: what must hold, what was given, how to fix) -------------------


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def check_probability(p: Any, name: str, where: str) -> float:
    if not _is_real(p):
        raise TypeError(
            f"{where}: {name} must be a probability (a float in [0, 1]); got "
            f"{type(p).__name__} {p!r}; pass e.g. {name}=0.5"
        )
    p = float(p)
    if not 0.0 <= p <= 1.0:  # also rejects nan
        raise ValueError(
            f"{where}: {name} must be a probability in [0, 1]; got {p}; "
            f"pass a value such as {name}=0.5"
        )
    return p


def check_nonnegative(value: Any, name: str, where: str) -> float:
    if not _is_real(value):
        raise TypeError(
            f"{where}: {name} must be a non-negative float; got {type(value).__name__} "
            f"{value!r}; pass e.g. {name}=0.1"
        )
    value = float(value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(
            f"{where}: {name} must be a finite float >= 0; got {value}; pass e.g. {name}=0.1"
        )
    return value


def check_positive_int(value: Any, name: str, where: str) -> int:
    return check_int(value, name, where, 1, fix=f"pass e.g. {name}=32")


def check_size(size: Any, name: str, where: str) -> tuple[int, int]:
    """``size`` as ``(height, width)``: an int means a square (or a 1-D length)."""
    if isinstance(size, Sequence) and not isinstance(size, str):
        if len(size) != 2:
            raise ValueError(
                f"{where}: {name} must be an int or a pair (height, width); got {size!r} "
                f"with {len(size)} entries; pass e.g. {name}=(32, 32)"
            )
        return check_positive_int(size[0], name, where), check_positive_int(size[1], name, where)
    value = check_positive_int(size, name, where)
    return value, value


def check_interval(
    value: Any,
    name: str,
    where: str,
    *,
    low: float,
    high: float = math.inf,
    open_low: bool = False,
    example: str,
) -> tuple[float, float]:
    """A pair ``(a, b)`` with ``low <= a <= b <= high`` (``low < a`` when ``open_low``)."""
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(_is_real(v) for v in value)
    ):
        raise TypeError(
            f"{where}: {name} must be a pair of floats (min, max); got {value!r}; "
            f"pass e.g. {name}={example}"
        )
    a, b = float(value[0]), float(value[1])
    if not ((a > low if open_low else a >= low) and a <= b <= high):
        bound = f"{low} {'<' if open_low else '<='} min <= max <= {high}"
        raise ValueError(
            f"{where}: {name} must satisfy {bound}; got {value!r}; pass e.g. {name}={example}"
        )
    return a, b


def check_callable(
    fn: Any, name: str, where: str, signature: str = "(sample, rng) -> sample"
) -> None:
    if not callable(fn):
        raise TypeError(
            f"{where}: {name} must be callable as {signature}; got "
            f"{type(fn).__name__} {fn!r}; pass a function or a seekdata.transforms operation"
        )


def check_generator(rng: Any, where: str) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{where}: rng must be a numpy.random.Generator; got {type(rng).__name__}; "
            "inside a seekdata loader pass seekdata.sample_rng(), outside one "
            "seekdata.sample_generator(seed, epoch, index)"
        )


def check_layout(layout: Any, where: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(
            f"{where}: layout must be 'CHW' or 'HWC'; got {layout!r}; pass layout='HWC' for "
            "(height, width, channels) arrays such as PIL or OpenCV images"
        )
    return str(layout)


# --- array kinds and axes ------------------------------------------------------------------


def check_array(x: Any, where: str) -> None:
    if not isinstance(x, np.ndarray | torch.Tensor):
        raise TypeError(
            f"{where}: the sample must be a numpy.ndarray or a torch.Tensor; got "
            f"{type(x).__name__}; convert it first, e.g. with torch.as_tensor(sample)"
        )


def spatial_axes(x: Any, layout: str, where: str) -> tuple[int, int]:
    """Non-negative (height, width) axes of an image ``x``: ``(H, W)``, ``(..., C, H, W)`` or
    ``(..., H, W, C)``. Leading dimensions are a batch that shares the draw."""
    check_array(x, where)
    nd = x.ndim
    if nd < 2:
        raise ValueError(
            f"{where}: needs an image with dimensions (H, W), (C, H, W) or (H, W, C); got "
            f"shape {tuple(x.shape)}; for 1-D sequences use RandomCrop, RandomHorizontalFlip, "
            "RandomErasing, GaussianNoise or TokenMask"
        )
    if nd == 2:
        return 0, 1
    return (nd - 2, nd - 1) if layout == "CHW" else (nd - 3, nd - 2)


def channel_axis(x: Any, layout: str) -> int | None:
    if x.ndim <= 2:
        return None
    return x.ndim - 3 if layout == "CHW" else x.ndim - 1


def window(ndim: int, axes: Sequence[int], starts: Sequence[int], stops: Sequence[int]) -> tuple:
    """An index tuple selecting ``starts[k]:stops[k]`` on ``axes[k]`` and everything else."""
    index: list[Any] = [slice(None)] * ndim
    for axis, start, stop in zip(axes, starts, stops, strict=True):
        index[axis] = slice(start, stop)
    return tuple(index)


def contiguous(x: Any) -> Any:
    return x.contiguous() if isinstance(x, torch.Tensor) else np.ascontiguousarray(x)


def copy(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x.copy()


# --- dtypes --------------------------------------------------------------------------------


def is_floating(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.is_floating_point()
    return bool(np.issubdtype(x.dtype, np.floating))


def is_integer(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)
    return bool(np.issubdtype(x.dtype, np.integer))


def check_real_dtype(x: Any, where: str) -> None:
    if not (is_floating(x) or is_integer(x)):
        raise TypeError(
            f"{where}: needs a floating-point or integer array; got dtype {x.dtype}; convert "
            "it first, e.g. x.float()"
        )


def integer_range(x: Any) -> tuple[int, int]:
    info = torch.iinfo(x.dtype) if isinstance(x, torch.Tensor) else np.iinfo(x.dtype)
    return int(info.min), int(info.max)


def value_bound(x: Any) -> float:
    """Top of the value range images of this dtype live in: 1.0 for floats, the dtype's
    maximum for integers (255 for uint8)."""
    return 1.0 if is_floating(x) else float(integer_range(x)[1])


def as_tensor(x: Any) -> torch.Tensor:
    """``x`` as a tensor; numpy input becomes a zero-copy view where numpy allows one."""
    if isinstance(x, torch.Tensor):
        return x
    if not x.flags.writeable or any(s < 0 for s in x.strides) or not x.dtype.isnative:
        x = np.array(x, dtype=x.dtype.newbyteorder("="))  # from_numpy refuses (or warns on) these
    return torch.from_numpy(x)


def working_float(t: torch.Tensor) -> torch.Tensor:
    """``t`` in the float dtype arithmetic runs in: float64 stays, all else is float32."""
    return t if t.dtype in (torch.float32, torch.float64) else t.to(torch.float32)


def like_input(
    t: torch.Tensor, x: Any, *, low: float | None = None, high: float | None = None
) -> Any:
    """Cast a float result ``t`` back to ``x``'s dtype and kind. Integers are rounded and
    clamped to the dtype's range (and to ``[low, high]`` when given)."""
    if is_integer(x):
        lo, hi = integer_range(x)
        lo = max(lo, math.ceil(low)) if low is not None else lo
        hi = min(hi, math.floor(high)) if high is not None else hi
        t = t.round().clamp_(lo, hi)
    elif low is not None or high is not None:
        t = t.clamp(low, high)
    dtype = x.dtype if isinstance(x, torch.Tensor) else torch.from_numpy(np.empty(0, x.dtype)).dtype
    t = t.to(dtype)
    return t if isinstance(x, torch.Tensor) else t.numpy()
