"""The hooks frameworks call on a loader (accelerate, Lightning), below the loader.

Frameworks rebuild, wrap or shard the loaders they are given, through protocols of their own:
accelerate reads ``loader._is_accelerate_prepared`` in ``Accelerator.prepare_data_loader`` and
iterates ``loader.batch_sampler`` when it rebuilds a loader; Lightning's DDP rebuilds a loader
as ``type(loader)(..., batch_sampler=type(loader.batch_sampler)(sampler=wrapper, ...))``. The
hooks here answer those protocols. They import neither the loader nor the frameworks: they
work on the loader through its public methods (``shard``, ``place``), and they recognise a
framework by the module of the object calling them (a frame, the one way these protocols say
who is asking).

- :func:`accelerate_prepares`: accelerate asks whether the loader is prepared. Only
  ``Accelerator.prepare_data_loader`` asking gets True: the loader is then sharded across
  accelerate's processes and its batches placed on ``accelerator.device``, and accelerate hands
  it back unrebuilt (a rebuild would fetch without per-sample randomness and cursor).
- :func:`refuse_accelerate_rebuild`: accelerate iterates ``loader.batch_sampler`` to rebuild the
  loader (``skip_first_batches``, ``BatchSamplerShard``): refused, naming the recipe.
- :func:`reshard_request`: Lightning rebuilt the batch sampler around its sampler wrapper of the
  loader's own sampler; :class:`Reshard` says which loader to rebuild on which rank
  (:func:`remember` recorded what the original loader was).
"""

from __future__ import annotations

import functools
import types
import weakref
from typing import Any, NamedTuple

import torch.utils.data

__all__ = [
    "ACCELERATE_RECIPE",
    "Reshard",
    "accelerate_prepares",
    "refuse_accelerate_rebuild",
    "remember",
    "reshard_request",
]

ACCELERATE_RECIPE = (
    "pass the seekdata loader to accelerator.prepare(...) as it is, resume it with "
    "accelerator.load_state(...) (which restores its cursor) and seek with "
    "seekdata.integrations.accelerate.skip_first_batches(loader, n); see docs/integrations.md"
)


def _from_accelerate(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "accelerate"


# --- accelerate ---------------------------------------------------------------------------------


def accelerate_prepares(loader: Any, frame: types.FrameType | None) -> bool:
    """``loader._is_accelerate_prepared`` read from ``frame``: True (hand the loader back
    unrebuilt) only when ``Accelerator.prepare_data_loader`` asks, after sharding the loader
    across accelerate's processes and placing its batches on the accelerator's device."""
    if frame is None or frame.f_code.co_name != "prepare_data_loader":
        return False
    owner: Any = frame.f_locals.get("self")
    if not (_from_accelerate(owner) and type(owner).__name__ == "Accelerator"):
        return False
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


def refuse_accelerate_rebuild(frame: types.FrameType | None) -> None:
    """``loader.batch_sampler`` is being iterated from ``frame``: refuse accelerate's rebuilt
    loaders (``skip_first_batches``' ``SkipBatchSampler``, ``prepare``'s ``BatchSamplerShard``),
    which would fetch without seekdata's per-sample randomness and cursor."""
    owner = frame.f_locals.get("self") if frame is not None else None
    if owner is not None and _from_accelerate(owner):
        raise RuntimeError(
            f"accelerate rebuilt a seekdata.StatefulDataLoader into a plain torch DataLoader "
            f"(its {type(owner).__name__} is iterating loader.batch_sampler): that loader would "
            f"fetch without seekdata's per-sample randomness and cursor; {ACCELERATE_RECIPE}"
        )


# --- Lightning ----------------------------------------------------------------------------------


class _Origin(NamedTuple):
    """What the loader that owns a sampler was built with: whether it built the sampler, and
    its seed (given, or adopted from a checkpoint)."""

    owns_sampler: bool
    seed_explicit: bool
    seed: int


_ORIGINS: weakref.WeakKeyDictionary[Any, _Origin] = weakref.WeakKeyDictionary()


def remember(sampler: Any, owns_sampler: bool, seed_explicit: bool, seed: int) -> None:
    """A loader over ``sampler`` was built (or adopted a seed): what a rebuild needs."""
    _ORIGINS[sampler] = _Origin(owns_sampler, seed_explicit, seed)


class Reshard(NamedTuple):
    """A framework asked for ``sampler`` on ``rank`` of ``world`` ranks (Lightning's DDP sampler
    injection); the rest is the original loader's."""

    sampler: Any  # the original loader's seekdata.DistributedSampler
    world: int
    rank: int
    batch_size: int
    drop_last: bool
    owns_sampler: bool
    seed_explicit: bool
    seed: int


def reshard_request(wrapper: Any, batch_size: int, drop_last: bool) -> Reshard:
    """``BatchIndices(wrapper, batch_size, drop_last)`` built by a framework: the reshard it asks
    for. Lightning's ``DistributedSamplerWrapper`` keeps the sampler it shards as
    ``wrapper.dataset._sampler``; it must be a loader's own seekdata sampler."""
    inner = getattr(getattr(wrapper, "dataset", None), "_sampler", None)
    origin = _ORIGINS.get(inner) if inner is not None else None
    if not isinstance(wrapper, torch.utils.data.DistributedSampler) or origin is None:
        raise TypeError(
            f"BatchIndices: a rebuilt seekdata batch sampler must wrap the loader's own "
            f"seekdata.DistributedSampler (Lightning's DDP sampler injection does); got "
            f"{type(wrapper).__name__}; pass Trainer(use_distributed_sampler=False) and "
            f"sampler=seekdata.DistributedSampler(dataset, num_replicas=..., rank=...), or "
            f"let the framework rebuild the loader from loader.sampler"
        )
    if type(wrapper).__name__.startswith("Unrepeated"):  # Lightning's predict: no padding
        raise TypeError(
            f"BatchIndices: {type(wrapper).__name__} shards without padding (Lightning's "
            f"predict), which a seekdata cursor shared by ranks does not do; predict with a "
            f"torch DataLoader, or pass Trainer(use_distributed_sampler=False) and a "
            f"seekdata.DistributedSampler(dataset, num_replicas=..., rank=...)"
        )
    return Reshard(inner, wrapper.num_replicas, wrapper.rank, batch_size, drop_last, *origin)
