"""accelerate: ``accelerator.prepare(model, optimizer, loader)`` with a seekdata loader.

accelerate rebuilds every ``DataLoader`` it prepares into its own ``DataLoaderShard`` over
``loader.dataset`` and ``loader.batch_sampler``: a plain torch loader that would fetch the right
indices without seekdata's per-sample randomness and without a cursor. A seekdata loader is
therefore handed back *unrebuilt*: ``StatefulDataLoader._is_accelerate_prepared`` (the flag
accelerate itself reads to avoid wrapping a loader twice) calls :func:`_adopt`, which

- shards the loader across accelerate's processes the way seekdata shards (rank r of W takes
  every W-th global position), so a 2-process run neither loses nor repeats a sample;
- moves batches to ``accelerator.device`` when accelerate would (``device_placement``);
- refuses the options it cannot honour exactly (``split_batches``, ``dispatch_batches``, a
  device mesh), naming the recipe that works.

``accelerator.save_state`` / ``load_state`` then save and restore the loader's cursor (the loader
sets ``use_stateful_dataloader``, the flag accelerate reads for that), and the global RNG state
accelerate saves per process covers model-side randomness. :func:`skip_first_batches` is the
O(1) seek; accelerate's own would rebuild the loader, so it fails loudly instead.

This module imports accelerate; ``import seekdata`` never imports it.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import accelerate
import torch.utils.data
from accelerate.utils import DistributedType, send_to_device

from seekdata import state as S
from seekdata.loader import StatefulDataLoader

__all__ = ["skip_first_batches"]

_RECIPE = (
    "pass the seekdata loader to accelerator.prepare(...) as it is, resume it with "
    "accelerator.load_state(...) (which restores its cursor) and seek with "
    "seekdata.integrations.accelerate.skip_first_batches(loader, n); see docs/integrations.md"
)


def _calling_accelerator(frame: types.FrameType | None) -> Any:
    """The Accelerator whose ``prepare_data_loader`` is asking, or None."""
    if frame is None or frame.f_code.co_name != "prepare_data_loader":
        return None
    owner = frame.f_locals.get("self")
    return owner if isinstance(owner, accelerate.Accelerator) else None


def _adopt(loader: StatefulDataLoader, frame: types.FrameType | None) -> bool:
    """Called when accelerate asks whether ``loader`` is prepared: True hands it back unrebuilt,
    after sharding it across the processes and setting up device placement."""
    accelerator = _calling_accelerator(frame)
    if accelerator is None:  # not Accelerator.prepare asking: the loader is not prepared
        return False
    where = "accelerator.prepare(seekdata.StatefulDataLoader)"
    refused = [
        name for name in ("split_batches", "dispatch_batches") if getattr(accelerator, name, False)
    ]
    if accelerator._prepare_device_mesh() is not None:
        refused.append("a device mesh (tensor/context parallel)")
    if accelerator.distributed_type in (DistributedType.XLA, DistributedType.MEGATRON_LM):
        refused.append(f"distributed_type={accelerator.distributed_type}")
    if refused:
        raise ValueError(
            f"{where}: seekdata shards batches itself and cannot keep its order exact with "
            f"{', '.join(refused)}; got an Accelerator with those set; build the Accelerator "
            f"without them (for split_batches=True, give the loader batch_size = global batch "
            f"// num_processes instead)"
        )
    _shard(loader, accelerator.num_processes, accelerator.process_index, where)
    placement = frame.f_locals.get("device_placement") if frame is not None else None
    if placement is None:
        placement = accelerator.device_placement
    if placement and accelerator.device.type != "cpu":
        loader._place = functools.partial(
            send_to_device, device=accelerator.device, non_blocking=accelerator.non_blocking
        )
    return True


def _shard(loader: StatefulDataLoader, world: int, rank: int, where: str) -> None:
    """Give a single-process loader rank ``rank`` of ``world``; accept one already sharded so."""
    sampler = loader.sampler
    if not loader.seekable or loader.batch_sampler is None:
        if world > 1:
            iterable = isinstance(loader.dataset, torch.utils.data.IterableDataset)
            what = "an IterableDataset" if iterable else "this sampler"
            raise ValueError(
                f"{where}: seekdata can shard only its own sampler across {world} processes; "
                f"got {what} ({type(sampler).__name__}, batch_sampler "
                f"{type(loader.batch_sampler).__name__}); build the loader with shuffle= or "
                f"sampler=seekdata.DistributedSampler(dataset), without batch_sampler="
            )
        return
    if (sampler.num_replicas, sampler.rank) == (world, rank):
        return
    if sampler.num_replicas != 1:
        raise ValueError(
            f"{where}: the loader's sampler is rank {sampler.rank} of {sampler.num_replicas} "
            f"but accelerate runs this process as rank {rank} of {world}; build the sampler "
            f"with num_replicas=accelerator.num_processes, rank=accelerator.process_index, or "
            f"leave it single-process and let prepare shard it"
        )
    sampler.reshard(world, rank)  # the cursor is a global position: it stays where it is


def _refuse_rebuild(frame: types.FrameType | None) -> None:
    """Called when ``loader.batch_sampler`` is iterated: refuse accelerate's rebuilt loaders
    (``skip_first_batches``' ``SkipBatchSampler``, ``prepare``'s ``BatchSamplerShard``)."""
    owner = frame.f_locals.get("self") if frame is not None else None
    if owner is not None and type(owner).__module__.startswith("accelerate."):
        raise RuntimeError(
            f"accelerate rebuilt a seekdata.StatefulDataLoader into a plain torch DataLoader "
            f"(its {type(owner).__name__} is iterating loader.batch_sampler): that loader would "
            f"fetch without seekdata's per-sample randomness and cursor; {_RECIPE}"
        )


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """``accelerator.skip_first_batches`` for seekdata loaders: an O(1) seek, nothing replayed.

    Places a :class:`seekdata.StatefulDataLoader`'s cursor at batch ``num_batches`` of its
    current epoch (counted from the epoch's start on this rank, as accelerate counts) and
    returns the same loader, so ``accelerator.load_state(dir)`` followed by
    ``skip_first_batches(loader, k)`` lands on batch k whether or not the state already did.
    Any other loader goes to ``accelerate.skip_first_batches``.
    """
    if not isinstance(dataloader, StatefulDataLoader):
        return accelerate.skip_first_batches(dataloader, num_batches=num_batches)
    where = "seekdata.integrations.accelerate.skip_first_batches"
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ValueError(f"{where}: num_batches must be an int >= 0; got {num_batches!r}")
    if isinstance(dataloader.dataset, torch.utils.data.IterableDataset):
        raise ValueError(
            f"{where}: an IterableDataset decides its own order and cannot seek; got a loader "
            f"over {type(dataloader.dataset).__name__}; resume it with load_state_dict"
        )
    state = dataloader.state_dict()
    if state[S.K_EXHAUSTED] and state[S.K_POSITION] >= state[S.K_N]:
        state[S.K_EPOCH] += 1  # the next iter() starts the next epoch: skip inside that one
    if dataloader.seekable and dataloader.batch_sampler is not None:
        batch = dataloader.batch_size or 1
        position = dataloader.sampler.position_after(0, num_batches * batch)
    else:  # a replayed sampler: the cursor counts batches (resuming replays their indices)
        position = min(num_batches, state[S.K_N])
    state.update({S.K_POSITION: position, S.K_STEP: num_batches, S.K_EXHAUSTED: False})
    dataloader.load_state_dict(state)
    return dataloader
