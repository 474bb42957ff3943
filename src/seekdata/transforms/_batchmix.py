"""Batch-level mixes: MixUp and CutMix, applied to a collated batch with the batch's rng.

A batch is ``(inputs, targets)`` (a tuple or a list, as ``default_collate`` makes from
``(x, y)`` samples) or a dict holding ``input_key`` and ``target_key`` (other entries pass
through untouched). ``inputs`` has the batch first, ``targets`` is either class indices
``(N,)`` (needs ``num_classes``) or soft labels ``(N, K)``; the result's targets are
float soft labels ``(N, K)`` whose rows sum to 1. Tensors in, tensors out; numpy in,
numpy out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from seekdata.transforms._arrays import (
    as_tensor,
    check_layout,
    check_nonnegative,
    check_positive_int,
    is_floating,
)


class _Mix:
    name = "_Mix"

    def __init__(
        self, alpha: float, num_classes: int | None, input_key: str, target_key: str
    ) -> None:
        self.alpha = check_nonnegative(alpha, "alpha", self.name)
        if self.alpha == 0.0:
            raise ValueError(
                f"{self.name}: alpha must be > 0 (λ ~ Beta(alpha, alpha)); got 0.0; "
                "pass e.g. alpha=0.2 for MixUp or alpha=1.0 for CutMix"
            )
        self.num_classes = None
        if num_classes is not None:
            self.num_classes = check_positive_int(num_classes, "num_classes", self.name)
        self.input_key, self.target_key = input_key, target_key

    def _split(self, batch: Any) -> tuple[Any, Any, Callable[[Any, Any], Any]]:
        if isinstance(batch, tuple | list) and len(batch) == 2:
            if isinstance(batch, list):
                return batch[0], batch[1], lambda x, y: [x, y]
            return batch[0], batch[1], lambda x, y: (x, y)
        if isinstance(batch, Mapping) and self.input_key in batch and self.target_key in batch:

            def rebuild(x: Any, y: Any) -> Any:
                out = dict(batch)
                out[self.input_key], out[self.target_key] = x, y
                return out

            return batch[self.input_key], batch[self.target_key], rebuild
        raise TypeError(
            f"{self.name}: the batch must be (inputs, targets) or a dict with keys "
            f"{self.input_key!r} and {self.target_key!r}; got {type(batch).__name__}"
            + (f" with keys {list(batch)}" if isinstance(batch, Mapping) else "")
            + "; return (x, y) from the dataset, or pass input_key=/target_key="
        )

    def _soft(self, targets: Any, n: int) -> torch.Tensor:
        if not isinstance(targets, np.ndarray | torch.Tensor):
            raise TypeError(
                f"{self.name}: targets must be a tensor or array; got {type(targets).__name__}"
            )
        t = as_tensor(targets)
        if t.ndim == 1 and not is_floating(t):
            if self.num_classes is None:
                raise ValueError(
                    f"{self.name}: targets are class indices, so num_classes is needed to "
                    f"make soft labels; got num_classes=None; pass e.g. num_classes=10"
                )
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.num_classes):
                raise ValueError(
                    f"{self.name}: class indices must be in [0, {self.num_classes}); got "
                    f"[{int(t.min())}, {int(t.max())}]; pass the right num_classes"
                )
            t = torch.nn.functional.one_hot(t.long(), self.num_classes).to(torch.float32)
        elif t.ndim == 2 and is_floating(t):
            if self.num_classes is not None and t.shape[1] != self.num_classes:
                raise ValueError(
                    f"{self.name}: soft targets have {t.shape[1]} classes but "
                    f"num_classes={self.num_classes}; pass matching num_classes or None"
                )
        else:
            raise ValueError(
                f"{self.name}: targets must be class indices (N,) of an integer dtype or "
                f"soft labels (N, K) of a float dtype; got shape {tuple(t.shape)} dtype "
                f"{t.dtype}"
            )
        if t.shape[0] != n:
            raise ValueError(
                f"{self.name}: inputs hold {n} samples but targets {t.shape[0]}; pass the "
                "targets of the same batch"
            )
        return t

    def __call__(self, batch: Any, rng: np.random.Generator) -> Any:
        inputs, targets, rebuild = self._split(batch)
        if not isinstance(inputs, np.ndarray | torch.Tensor) or inputs.ndim < 1:
            raise TypeError(
                f"{self.name}: inputs must be a batched tensor or array (N, ...); got "
                f"{type(inputs).__name__}"
            )
        x = as_tensor(inputs)
        y = self._soft(targets, x.shape[0])
        lam = float(rng.beta(self.alpha, self.alpha))
        perm = torch.from_numpy(rng.permutation(x.shape[0]))
        x, lam = self._mix_inputs(x, perm, lam, rng)
        y = y * lam + y[perm] * (1.0 - lam)
        return rebuild(
            x.numpy() if isinstance(inputs, np.ndarray) else x,
            y.numpy() if isinstance(targets, np.ndarray) else y,
        )

    def _mix_inputs(
        self, x: torch.Tensor, perm: torch.Tensor, lam: float, rng: np.random.Generator
    ) -> tuple[torch.Tensor, float]:
        raise NotImplementedError


class MixUp(_Mix):
    """``x = λ x + (1 − λ) x[perm]``, same for the soft targets; λ ~ Beta(alpha, alpha),
    ``perm`` a permutation of the batch, both from ``rng``. Inputs must be floating point.
    """

    name = "MixUp"

    def __init__(
        self,
        alpha: float = 0.2,
        *,
        num_classes: int | None = None,
        input_key: str = "input",
        target_key: str = "target",
    ) -> None:
        super().__init__(alpha, num_classes, input_key, target_key)

    def _mix_inputs(
        self, x: torch.Tensor, perm: torch.Tensor, lam: float, rng: np.random.Generator
    ) -> tuple[torch.Tensor, float]:
        if not x.is_floating_point():
            raise TypeError(
                f"MixUp: inputs must be floating point to blend; got dtype {x.dtype}; "
                "convert first, e.g. x.float() / 255"
            )
        return x * lam + x[perm] * (1.0 - lam), lam

    def __repr__(self) -> str:
        return f"MixUp(alpha={self.alpha}, num_classes={self.num_classes})"


class CutMix(_Mix):
    """Paste a box of ``x[perm]`` into ``x``; targets mix by the pasted area fraction.

    λ ~ Beta(alpha, alpha); the box has sides ``sqrt(1 − λ)`` of H and W around a uniform
    centre, clipped to the image; the target weight is recomputed from the clipped box.
    Inputs are ``(N, ..., H, W)`` (``layout="CHW"``) or ``(N, H, W, C)`` (``"HWC"``); any dtype.
    """

    name = "CutMix"

    def __init__(
        self,
        alpha: float = 1.0,
        *,
        num_classes: int | None = None,
        layout: str = "CHW",
        input_key: str = "input",
        target_key: str = "target",
    ) -> None:
        super().__init__(alpha, num_classes, input_key, target_key)
        self.layout = check_layout(layout, "CutMix")

    def _mix_inputs(
        self, x: torch.Tensor, perm: torch.Tensor, lam: float, rng: np.random.Generator
    ) -> tuple[torch.Tensor, float]:
        need = 3 if self.layout == "CHW" else 4
        if x.ndim < need:
            raise ValueError(
                f"CutMix: inputs must be a batch of images, at least {need}-D for layout "
                f"{self.layout!r}; got shape {tuple(x.shape)}; pass layout= to match"
            )
        ah, aw = (x.ndim - 2, x.ndim - 1) if self.layout == "CHW" else (x.ndim - 3, x.ndim - 2)
        height, width = x.shape[ah], x.shape[aw]
        cut = math.sqrt(1.0 - lam)
        ch, cw = int(height * cut), int(width * cut)
        cy, cx = (int(v) for v in rng.integers(0, [height, width]))
        top, bottom = max(cy - ch // 2, 0), min(cy + ch // 2, height)
        left, right = max(cx - cw // 2, 0), min(cx + cw // 2, width)
        out = x.clone()
        index: list[Any] = [slice(None)] * x.ndim
        index[ah], index[aw] = slice(top, bottom), slice(left, right)
        out[tuple(index)] = x[perm][tuple(index)]
        lam = 1.0 - (bottom - top) * (right - left) / (height * width)
        return out, lam

    def __repr__(self) -> str:
        return f"CutMix(alpha={self.alpha}, num_classes={self.num_classes}, layout={self.layout!r})"
