"""The one table of framework hooks: how each framework that rebuilds, wraps or shards loaders
is recognised, and what a seekdata loader does when it asks.

Frameworks reach a loader through protocols of their own: accelerate reads
``loader._is_accelerate_prepared`` in ``Accelerator.prepare_data_loader`` and iterates
``loader.batch_sampler`` when it rebuilds a loader; Lightning's DDP rebuilds a loader as
``type(loader)(..., batch_sampler=type(loader.batch_sampler)(sampler=wrapper, ...))``. The
loader names no framework: at each of these moments (an :data:`EVENTS` entry) it makes one
call, :func:`consult`, which runs the first :class:`Hook` of :data:`HOOKS` for that event whose
framework is imported and which recognises who is asking.

Adding a framework is adding rows to :data:`HOOKS`:

- ``event``: one of :data:`EVENTS` (below: what the loader passes, what the hook returns);
- ``modules``: the framework's top-level modules; the hook is skipped until one is imported
  (``()``: always consulted), so a loader never pays for a framework that is not there;
- ``recognise(frame, subject)``: whether this framework is asking (the calling frame: the one
  way these protocols say who asks; the subject: the loader or the object handed over);
- ``act(frame, subject, *details)``: what to do; its return value is the loader's answer.

The events:

- ``"prepared"``: ``loader._is_accelerate_prepared`` is read (subject: the loader). The answer
  is a bool (True: the framework hands the loader back unrebuilt); no hook: False.
- ``"batch_sampler_iterated"``: ``loader.batch_sampler`` is iterated (subject: the batch
  sampler's caller's object). A hook refuses a rebuild by raising; the answer is ignored.
- ``"batch_sampler_rebuilt"``: the loader's batch sampler class was called with another
  sampler (subject: that sampler; details: ``batch_size``, ``drop_last``). The answer is a
  :class:`~seekdata._loader.rebuild.RankRequest`; no hook: a TypeError naming the recipe.

The loader imports this module lazily, at the moment it consults it: ``import seekdata``
imports no integration. It works on a loader through its public methods (``assign_rank``,
``place``) and imports no framework until that framework is the one asking.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import torch.utils.data

from seekdata._loader.rebuild import RankRequest, origin

__all__ = ["ACCELERATE_RECIPE", "EVENTS", "HOOKS", "Hook", "consult"]

EVENTS = ("prepared", "batch_sampler_iterated", "batch_sampler_rebuilt")

ACCELERATE_RECIPE = (
    "pass the seekdata loader to accelerator.prepare(...) as it is, resume it with "
    "accelerator.load_state(...) (which restores its cursor) and seek with "
    "seekdata.integrations.accelerate.skip_first_batches(loader, n); see docs/integrations.md"
)


@dataclasses.dataclass(frozen=True)
class Hook:
    """One row of :data:`HOOKS`: a framework's answer to one event."""

    framework: str  # for messages and readers
    event: str  # one of EVENTS
    modules: tuple[str, ...]  # consulted once one of these is imported; (): always
    recognise: Callable[[types.FrameType | None, Any], bool]
    act: Callable[..., Any]


# --- accelerate ---------------------------------------------------------------------------------


def _from_accelerate(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "accelerate"


def _accelerate_asks(frame: types.FrameType | None, loader: Any) -> bool:
    """``Accelerator.prepare_data_loader`` is reading the flag."""
    if frame is None or frame.f_code.co_name != "prepare_data_loader":
        return False
    owner: Any = frame.f_locals.get("self")
    return _from_accelerate(owner) and type(owner).__name__ == "Accelerator"


def _accelerate_prepares(frame: types.FrameType, loader: Any) -> bool:
    """True (hand the loader back unrebuilt), after assigning the loader its rank among
    accelerate's processes and placing its batches on the accelerator's device."""
    owner: Any = frame.f_locals["self"]
    where = "accelerator.prepare(seekdata.StatefulDataLoader)"
    refused = [name for name in ("split_batches", "dispatch_batches") if getattr(owner, name, 0)]
    if owner._prepare_device_mesh() is not None:
        refused.append("a device mesh (tensor/context parallel)")
    kind = str(getattr(owner.distributed_type, "value", owner.distributed_type))
    if kind in ("XLA", "MEGATRON_LM"):
        refused.append(f"distributed_type={kind}")
    if refused:
        raise ValueError(
            f"{where}: seekdata shards batches itself and cannot keep its order exact with "
            f"{', '.join(refused)}; got an Accelerator with those set; build the Accelerator "
            f"without them (for split_batches=True, give the loader batch_size = global batch "
            f"// num_processes instead)"
        )
    try:
        loader.assign_rank(owner.num_processes, owner.process_index)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    placement = frame.f_locals.get("device_placement")
    if placement is None:
        placement = owner.device_placement
    if placement and owner.device.type != "cpu":
        from accelerate.utils import send_to_device  # accelerate is asking: it is imported

        loader.place(
            functools.partial(send_to_device, device=owner.device, non_blocking=owner.non_blocking)
        )
    return True


def _accelerate_iterates(frame: types.FrameType | None, subject: Any) -> bool:
    owner = frame.f_locals.get("self") if frame is not None else None
    return owner is not None and _from_accelerate(owner)


def _refuse_accelerate_rebuild(frame: types.FrameType, subject: Any) -> None:
    """accelerate's rebuilt loaders (``skip_first_batches``' ``SkipBatchSampler``,
    ``prepare``'s ``BatchSamplerShard``) would fetch without seekdata's per-sample randomness
    and cursor: refused."""
    owner = frame.f_locals["self"]
    raise RuntimeError(
        f"accelerate rebuilt a seekdata.StatefulDataLoader into a plain torch DataLoader "
        f"(its {type(owner).__name__} is iterating loader.batch_sampler): that loader would "
        f"fetch without seekdata's per-sample randomness and cursor; {ACCELERATE_RECIPE}"
    )


# --- Lightning ----------------------------------------------------------------------------------


def _wrapped(wrapper: Any) -> Any:
    """What Lightning's ``DistributedSamplerWrapper`` shards: ``wrapper.dataset._sampler``."""
    return getattr(getattr(wrapper, "dataset", None), "_sampler", None)


def _lightning_rebuilds(frame: types.FrameType | None, wrapper: Any) -> bool:
    """A torch ``DistributedSampler`` around a sampler a seekdata loader owns."""
    return isinstance(wrapper, torch.utils.data.DistributedSampler) and (
        origin(_wrapped(wrapper)) is not None
    )


def _lightning_rank_request(
    frame: types.FrameType | None, wrapper: Any, batch_size: int, drop_last: bool
) -> RankRequest:
    if type(wrapper).__name__.startswith("Unrepeated"):  # Lightning's predict: no padding
        raise TypeError(
            f"BatchIndices: {type(wrapper).__name__} shards without padding (Lightning's "
            f"predict), which a seekdata cursor shared by ranks does not do; predict with a "
            f"torch DataLoader, or pass Trainer(use_distributed_sampler=False) and a "
            f"seekdata.DistributedSampler(dataset, num_replicas=..., rank=...)"
        )
    inner = _wrapped(wrapper)
    built = origin(inner)
    assert built is not None  # recognised
    return RankRequest(inner, wrapper.num_replicas, wrapper.rank, batch_size, drop_last, *built)


# --- the table ----------------------------------------------------------------------------------

HOOKS: tuple[Hook, ...] = (
    Hook("accelerate", "prepared", ("accelerate",), _accelerate_asks, _accelerate_prepares),
    Hook(
        "accelerate", "batch_sampler_iterated", ("accelerate",), _accelerate_iterates,
        _refuse_accelerate_rebuild,
    ),
    Hook("lightning", "batch_sampler_rebuilt", (), _lightning_rebuilds, _lightning_rank_request),
)  # fmt: skip


def consult(event: str, frame: types.FrameType | None, subject: Any, *details: Any) -> Any:
    """The loader's one call at ``event``: the first hook for it whose framework is imported
    and recognises who asks acts, and its answer is returned; none: the event's default."""
    for hook in HOOKS:
        if hook.event != event:
            continue
        if hook.modules and not any(m in sys.modules for m in hook.modules):
            continue
        if hook.recognise(frame, subject):
            return hook.act(frame, subject, *details)
    if event == "batch_sampler_rebuilt":
        raise TypeError(
            f"BatchIndices: a rebuilt seekdata batch sampler must wrap the loader's own "
            f"seekdata.DistributedSampler (Lightning's DDP sampler injection does); got "
            f"{type(subject).__name__}; pass Trainer(use_distributed_sampler=False) and "
            f"sampler=seekdata.DistributedSampler(dataset, num_replicas=..., rank=...), or "
            f"let the framework rebuild the loader from loader.sampler"
        )
    return False if event == "prepared" else None
