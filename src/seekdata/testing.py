"""Helpers for users' own tests: prove that a pipeline resumes exactly.

:func:`assert_exact_resume` runs a loader uninterrupted, then interrupted at every step
(epoch ends included) and resumed from a JSON round trip of its state, optionally with other
loader arguments (another ``num_workers``), and compares every batch bit for bit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["assert_exact_resume", "first_difference", "run_loop"]


def first_difference(a: Any, b: Any, path: str = "batch") -> str | None:
    """Where two batches differ (path, and the max difference for tensors), or None."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{path}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        if torch.equal(a, b):
            return None
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        return f"{path}: values differ, max |difference| = {diff:.6g}"
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return first_difference(
            torch.as_tensor(np.asarray(a)), torch.as_tensor(np.asarray(b)), path
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} vs {list(b)}"
        for key in a:
            found = first_difference(a[key], b[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, Sequence) and isinstance(b, Sequence) and not isinstance(a, str | bytes):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    same = a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )
    return None if same else f"{path}: {a!r} vs {b!r}"


def run_loop(
    loader: Any,
    epochs: Iterable[int],
    on_batch: Callable[[Any, int, int, int], bool],
    *,
    set_epoch: bool = True,
    limit: int | None = None,
    in_epoch: int = 0,
    steps: int = 0,
) -> int:
    """The training loop stand-in of every resume check (``assert_exact_resume``,
    ``seekdata verify``): returns the steps done when it ends or stops.

    For each epoch: ``loader.set_epoch(epoch)`` when ``set_epoch``, then at most ``limit``
    batches (all without a limit), calling ``on_batch(batch, epoch, k, steps)`` after each
    (``k`` counts the epoch's batches, ``steps`` all of them) and ``on_batch(None, epoch + 1,
    0, steps)`` after the epoch's loop; a True from a batch's call stops the loop. A resumed
    loader continues mid-epoch: its first epoch counts from ``in_epoch``, steps from ``steps``.
    """
    step = steps
    for i, epoch in enumerate(epochs):
        if set_epoch:
            loader.set_epoch(epoch)
        k = in_epoch if i == 0 else 0
        for batch in loader if limit is None or k < limit else ():
            k, step = k + 1, step + 1
            if on_batch(batch, epoch, k, step):
                return step
            if limit is not None and k >= limit:
                break
        on_batch(None, epoch + 1, 0, step)
    return step


def _run(
    loader: Any, epochs: Iterable[int], set_epoch: bool, stop: int | None, out: list[Any]
) -> tuple[int, dict[str, Any]] | None:
    """:func:`run_loop` keeping the batches in ``out``; returns (epoch, state) when it stops
    after ``stop`` batches."""
    stopped: list[tuple[int, dict[str, Any]]] = []

    def on_batch(batch: Any, epoch: int, k: int, step: int) -> bool:
        if batch is None:
            return False
        out.append(batch)
        if stop is not None and len(out) == stop:
            stopped.append((epoch, json.loads(json.dumps(loader.state_dict()))))
            return True
        return False

    run_loop(loader, epochs, on_batch, set_epoch=set_epoch)
    return stopped[0] if stopped else None


def assert_exact_resume(
    make_loader: Callable[..., Any],
    *,
    epochs: int = 2,
    stop_at: Iterable[int] | None = None,
    resume_kwargs: Mapping[str, Any] | None = None,
    set_epoch: bool = False,
    compare: Callable[[Any, Any, str], str | None] = first_difference,
) -> int:
    """Assert that interrupting ``make_loader()``'s stream anywhere and resuming is exact.

    ``make_loader(**kwargs)`` builds a fresh loader; the resumed one is built with
    ``resume_kwargs`` (e.g. ``{"num_workers": 2}``). The loop runs ``epochs`` epochs, calling
    ``loader.set_epoch(epoch)`` first when ``set_epoch``. It is interrupted after each step in
    ``stop_at`` (default: every step, 0 and the last included), the state goes through JSON,
    and a new loader continues the same loop from the interrupted epoch. Raises
    ``AssertionError`` naming the first divergence: stop point, step, field, max difference.
    Returns the number of resume points checked.
    """
    reference: list[Any] = []
    _run(make_loader(), range(epochs), set_epoch, None, reference)
    points = list(range(len(reference) + 1)) if stop_at is None else list(stop_at)
    for stop in points:
        got: list[Any] = []
        first = make_loader()
        if stop == 0:
            stopped: tuple[int, dict[str, Any]] | None = (
                0,
                json.loads(json.dumps(first.state_dict())),
            )
        else:
            stopped = _run(first, range(epochs), set_epoch, stop, got)
        del first
        if stopped is None:
            raise AssertionError(
                f"assert_exact_resume: stop point {stop} is past the run's {len(reference)} steps"
            )
        epoch, state = stopped
        resumed = make_loader(**dict(resume_kwargs or {}))
        resumed.load_state_dict(state)
        _run(resumed, range(epochs)[epoch:], set_epoch, None, got)
        del resumed
        if len(got) != len(reference):
            raise AssertionError(
                f"resume after step {stop} (epoch {epoch}) gave {len(got)} batches in all, the "
                f"uninterrupted run {len(reference)}; state was {state}"
            )
        for step, (want, have) in enumerate(zip(reference, got, strict=True)):
            found = compare(want, have, "batch")
            if found:
                raise AssertionError(
                    f"resume after step {stop} (epoch {epoch}) diverges at step {step}: {found}; "
                    f"state was {state}"
                )
    return len(points)
