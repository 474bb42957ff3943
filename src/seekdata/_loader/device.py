"""Batches on the device ahead of the step: the loader's ``device=`` and ``device_prefetch=``.

The engine's iterator is wrapped in a :class:`Lookahead`: at each ``next()`` it pulls batches
until ``device_prefetch`` of them wait beyond the one it hands out, and starts each one's copy
to the device as it pulls it — from pinned memory, ``non_blocking``, on a side CUDA stream,
with an event recorded after the copy. At hand-out the caller's current stream waits on the
batch's event (on the GPU: the host never blocks) and each copied tensor is marked as used on
that stream (``record_stream``), so the allocator keeps it until the step's kernels are done.
The copy of batch k + 1 thus runs while step k computes.

Everything happens on the caller's thread: with ``num_workers=0`` the engine's iterator runs
the dataset, whose per-sample reseeding must not race the caller's step on process-wide
global RNG; the overlap comes from the asynchronous copy, not from a host thread.

The loader counts a batch (cursor, step RNG, a failed batch's error) when this iterator hands
it out, never when it is pulled, so ``state_dict()`` and a resume do not see the look-ahead.
With ``device="cpu"`` nothing is copied but the same look-ahead runs (testable on any machine).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

import torch

from seekdata._core.checks import check_int

__all__ = ["CudaStreams", "DevicePrefetch", "Lookahead", "check_depth", "move", "prefetch_option"]

_FIX = "pass e.g. device='cuda' (or torch.device('cuda', local_rank)), 'cpu', or None"


def check_depth(depth: Any, where: str) -> int:
    """``device_prefetch``: an int >= 1 (the integer rule of ``_core/checks.py``)."""
    what = "an int >= 1 (batches moved ahead of the one handed out)"
    depth = check_int(depth, "device_prefetch", where, what=what, fix="pass e.g. device_prefetch=1")
    if depth < 1:
        raise ValueError(
            f"{where}: device_prefetch must be >= 1 (batches moved ahead of the one handed "
            f"out); got {depth}; pass device_prefetch=1 (or device=None to move nothing)"
        )
    return depth


def prefetch_option(device: Any, depth: Any, where: str) -> DevicePrefetch | None:
    """The checked ``device=`` / ``device_prefetch=`` pair: None when ``device`` is None."""
    depth = check_depth(depth, where)
    if device is None:
        return None
    if not isinstance(device, str | torch.device):
        raise TypeError(
            f"{where}: device must be a str or torch.device (where each batch is placed ahead "
            f"of the step) or None; got {type(device).__name__} {device!r}; {_FIX}"
        )
    try:
        parsed = torch.device(device)
    except RuntimeError as e:
        raise ValueError(
            f"{where}: device must name a device torch knows; got device={device!r}; {_FIX}"
        ) from e
    if parsed.type == "cpu":
        return DevicePrefetch(parsed, depth)
    if parsed.type != "cuda":
        raise ValueError(
            f"{where}: device= places batches with a CUDA stream, so it must be a CUDA device "
            f"or 'cpu'; got device={str(parsed)!r} ({_available()}); {_FIX}, and move batches "
            f"to {parsed.type} in the training loop"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"{where}: device= must be a device this machine has; got device={str(parsed)!r}, "
            f"but torch.cuda.is_available() is False here (torch {torch.__version__}; "
            f"{_available()}); pass device='cpu' (the same look-ahead, no copy) or None, or run "
            f"on a CUDA machine"
        )
    count = torch.cuda.device_count()
    if parsed.index is not None and parsed.index >= count:
        raise ValueError(
            f"{where}: device={str(parsed)!r} must be one of this machine's {count} CUDA "
            f"device(s); got index {parsed.index} ({_available()}); pass one of them, e.g. "
            f"torch.device('cuda', local_rank)"
        )
    return DevicePrefetch(parsed, depth)


def _available() -> str:
    names = ["'cpu'"]
    if torch.cuda.is_available():
        names += [f"'cuda:{i}'" for i in range(torch.cuda.device_count())]
    return "available: " + ", ".join(names)


class CudaStreams:
    """The CUDA calls a :class:`Lookahead` makes. Tests hand it an object with the same methods
    that runs on the CPU and records the calls, so the stream and event logic runs in CI."""

    def new_stream(self, device: torch.device) -> Any:
        return torch.cuda.Stream(device)

    def use(self, stream: Any) -> Any:
        return torch.cuda.stream(stream)

    def new_event(self) -> Any:
        return torch.cuda.Event()

    def current(self, device: torch.device) -> Any:
        return torch.cuda.current_stream(device)

    def copy(self, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``tensor`` on ``device``, copied asynchronously (the same object when it is there)."""
        if tensor.device.type == "cpu" and not tensor.is_pinned():
            tensor = tensor.pin_memory()  # the engine pins; this covers what it did not reach
        return tensor.to(device, non_blocking=True)

    def record(self, tensor: torch.Tensor, stream: Any) -> None:
        tensor.record_stream(stream)


class DevicePrefetch:
    """The checked option: where batches go and how many ahead. ``streams`` replaces the CUDA
    calls (a test's fake); without it, a CPU device only looks ahead."""

    def __init__(self, device: torch.device, depth: int, streams: Any = None) -> None:
        self.device, self.depth, self.streams = device, depth, streams

    @property
    def pins(self) -> bool:
        """Whether the engine should pin batches (a copy from pinned memory is asynchronous)."""
        return self.device.type == "cuda"

    def wrap(self, source: Iterator[Any]) -> Lookahead:
        if self.streams is None and self.device.type == "cpu":
            return Lookahead(source, self.depth, None)
        device = self.device
        if device.type == "cuda" and device.index is None:  # the current device, now
            device = torch.device("cuda", torch.cuda.current_device())
        return Lookahead(source, self.depth, _Copies(device, self.streams or CudaStreams()))


class _Raised:
    """An error the source raised while pulled ahead: raised when its step is handed out."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Copies:
    """Starts each batch's copy on a side stream; at hand-out, orders the caller's stream
    after it."""

    def __init__(self, device: torch.device, streams: Any) -> None:
        self.device, self.streams = device, streams
        self.stream = streams.new_stream(device)

    def start(self, batch: Any) -> tuple[Any, Any]:
        copied: list[torch.Tensor] = []

        def one(tensor: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.streams.copy(tensor, self.device)
            if out is not tensor:
                copied.append(out)
            return out

        with self.streams.use(self.stream):
            moved = move(batch, one)
            if not copied:  # nothing to copy (a FailedBatch, strings, tensors already there)
                return batch, None
            event = self.streams.new_event()
            event.record(self.stream)
        return moved, (event, copied)

    def ready(self, moved: Any, pending: Any) -> Any:
        if pending is None:
            return moved
        event, copied = pending
        current = self.streams.current(self.device)
        current.wait_event(event)  # the step's kernels start after the copy; the host goes on
        for tensor in copied:  # allocated on the side stream, used on the caller's
            self.streams.record(tensor, current)
        return moved


class Lookahead:
    """Pulls from ``source`` until ``depth`` batches wait beyond the one handed out, starting
    each one's copy (``copies``; None: as they are) as it is pulled. An error raised while
    pulling or copying a batch is kept in its place and raised when that step is handed out
    (not counted, as an error torch's iterator raises)."""

    def __init__(self, source: Iterator[Any], depth: int, copies: _Copies | None) -> None:
        self._source = source
        self._depth = depth
        self._copies = copies
        self._waiting: collections.deque[Any] = collections.deque()
        self._ended = False

    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> Any:
        waiting = self._waiting
        while not self._ended and len(waiting) <= self._depth:
            try:
                batch = next(self._source)
                copies = self._copies
                waiting.append((batch, None) if copies is None else copies.start(batch))
            except StopIteration:
                self._ended = True
            except Exception as error:  # its step's error (a fetch, a copy): raised in turn
                waiting.append(_Raised(error))
                break
        if not waiting:
            raise StopIteration
        entry = waiting.popleft()
        if type(entry) is _Raised:
            raise entry.error
        moved, pending = entry
        copies = self._copies
        return moved if pending is None or copies is None else copies.ready(moved, pending)

    def __getattr__(self, name: str) -> Any:  # torch's iterator attributes (_workers, ...)
        if name.startswith("__") or "_source" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["_source"], name)


def move(data: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``data`` with ``fn`` applied to every tensor, by torch's ``pin_memory`` rules (mappings,
    namedtuples, tuples, sequences), plus dataclasses; other leaves pass through as they are."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, str | bytes):
        return data
    if isinstance(data, Mapping):
        items = {k: move(v, fn) for k, v in data.items()}
        try:
            if isinstance(data, MutableMapping):  # a copy keeps the mapping type's extras
                clone = copy.copy(data)
                clone.update(items)
                return clone
            return type(data)(items)  # type: ignore[call-arg]
        except TypeError:
            return items
    if isinstance(data, tuple):
        if hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*(move(v, fn) for v in data))
        return type(data)(move(v, fn) for v in data)
    if isinstance(data, Sequence):
        values = [move(v, fn) for v in data]
        try:
            if isinstance(data, MutableSequence):  # a copy keeps the sequence type's extras
                same = copy.copy(data)
                same[:] = values
                return same
            return type(data)(values)  # type: ignore[call-arg]
        except TypeError:
            return values
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        fields = dataclasses.fields(data)
        return dataclasses.replace(
            data, **{f.name: move(getattr(data, f.name), fn) for f in fields if f.init}
        )
    return data
