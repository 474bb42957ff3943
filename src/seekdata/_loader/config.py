"""A loader's configuration: its arguments, checked once, as one frozen value.

:class:`seekdata.StatefulDataLoader` calls :meth:`LoaderConfig.from_args` with the arguments it
was given; every check of them (torch's rules first, in torch's order, then seekdata's) runs
there, once, and the engines read the result (``config.batch_size``, ``config.seed``, ...) and
nothing else. A parameter is followed from ``StatefulDataLoader(...)`` to where it is used by
its name: ``config.<name>``.

What may change after construction is not here but on the engine: the seed a checkpoint brings
(``seed=None``), ``step_rng``, ``device``/``device_prefetch`` and torch's attributes read at
every ``iter()`` (``num_workers``, ...), which the loader's ``__setattr__`` forwards.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from seekdata._core import globalrng as _globalrng
from seekdata._core.checks import check_bool, check_counter, check_int
from seekdata._core.growth import Growth
from seekdata._loader import device as _device
from seekdata._loader.frameworks import Reshard
from seekdata._loader.seed import default_seed
from seekdata._loader.torch_api import check_torch_args, check_worker_method

__all__ = ["LoaderConfig"]


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """The checked arguments of one :class:`seekdata.StatefulDataLoader`."""

    seed: int  # the seed at construction (a checkpoint's may replace it: the engine's ``seed``)
    seed_explicit: bool  # seed= was given (else the checkpoint's seed wins at load)
    sampler: Any  # the user's sampler, or the original loader's in a reshard; None: our own
    batch_sampler: Any
    owns_sampler: bool  # the loader builds its own DistributedSampler (shuffle=, no sampler)
    shuffle: bool | None
    batch_size: int | None  # None: no batching (torch's rule); also with a batch_sampler
    drop_last: bool
    collate_fn: Callable[[list[Any]], Any] | None  # the user's; None: torch's default
    batch_transform: Callable[[Any, np.random.Generator], Any] | None
    worker_init_fn: Callable[[int], None] | None
    reseed: tuple[str, ...]  # the global generators seeded per sample (reseed_global_rng)
    reseed_global_rng: bool | tuple[str, ...]  # as the user says it (loader.reseed_global_rng)
    step_rng: bool
    batched_fetch: bool
    snapshot_every_n_steps: int | None
    grown: Sequence[Growth] | None
    lookahead: _device.DevicePrefetch | None  # device= / device_prefetch=
    options: Mapping[str, Any]  # torch's DataLoader arguments every engine passes on unchanged
    reshard: Reshard | None  # Lightning's DDP rebuilt the loader: the rank to become
    worker_method: str = "multiprocessing"  # workers are processes, or threads ("thread")

    @property
    def per_sample(self) -> bool:
        """``batch_size=None`` without a batch sampler: one sample per step, not collated."""
        return self.batch_size is None and self.batch_sampler is None

    @classmethod
    def from_args(
        cls,
        dataset: Any,
        batch_size: Any,
        shuffle: Any,
        sampler: Any,
        batch_sampler: Any,
        num_workers: int,
        collate_fn: Callable[[list[Any]], Any] | None,
        pin_memory: bool,
        drop_last: Any,
        timeout: float,
        worker_init_fn: Callable[[int], None] | None,
        multiprocessing_context: Any,
        generator: torch.Generator | None,
        *,
        prefetch_factor: int | None,
        persistent_workers: bool,
        pin_memory_device: str,
        in_order: Any,
        seed: Any,
        reseed_global_rng: bool | Collection[str],
        batch_transform: Any,
        snapshot_every_n_steps: Any,
        step_rng: Any,
        batched_fetch: Any,
        device: Any,
        device_prefetch: Any,
        grown: Sequence[Growth] | None,
        where: str,
        stacklevel: int = 2,
        worker_method: Any = "multiprocessing",
    ) -> LoaderConfig:
        """Check every argument once (a wrong one raises, in torch's order first); ``stacklevel``
        points the ``generator=`` warning at the user's line."""
        # a BatchIndices a framework rebuilt around our sampler carries its reshard request
        reshard = getattr(batch_sampler, "reshard", None)
        if not isinstance(reshard, Reshard):
            reshard = None
        else:  # Lightning's DDP rebuilt us around our own sampler
            sampler, batch_sampler, shuffle = reshard.sampler, None, None
            batch_size, drop_last = reshard.batch_size, reshard.drop_last
        prefetch_factor = check_torch_args(
            dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, drop_last,
            timeout, prefetch_factor, persistent_workers,
        )  # fmt: skip
        worker_method = check_worker_method(worker_method, multiprocessing_context, where)
        if batch_sampler is not None:
            batch_size, drop_last = None, False  # torch's rule: the batch sampler decides both
        seed_explicit = seed is not None  # else the checkpoint's seed wins at load
        if reshard is not None:  # as the loader it rebuilds: its seed, chosen or not
            seed, seed_explicit = reshard.seed, reshard.seed_explicit
        if seed is None:
            seed = default_seed(generator, where)
            generator = None  # used: it decided the seed
        else:
            seed = check_counter(seed, "seed", where)
        if snapshot_every_n_steps is not None:  # torchdata's: 0 or None snapshot on request
            check_int(snapshot_every_n_steps, "snapshot_every_n_steps", where, 0)
        reseed = _globalrng.reseed_set(reseed_global_rng, where)  # bool or generator names
        reseed_as_given: bool | tuple[str, ...] = (
            bool(reseed_global_rng) if isinstance(reseed_global_rng, bool | np.bool_) else reseed
        )
        drop_last = check_bool(drop_last, "drop_last", where)
        in_order = check_bool(in_order, "in_order", where)
        step_rng = check_bool(step_rng, "step_rng", where)
        batched_fetch = check_bool(batched_fetch, "batched_fetch", where)
        if batch_size is not None:
            batch_size = check_int(batch_size, "batch_size", where, 1)
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if iterable and worker_method == "thread":
            raise ValueError(
                f"{where}: worker_method='thread' runs map-style datasets (a Dataset with "
                f"__getitem__); an IterableDataset's state is torchdata's, kept per worker "
                f"process; got an IterableDataset; pass "
                f"worker_method='multiprocessing', or a map-style dataset (docs/threads.md)"
            )
        _check_batch_transform(batch_transform, iterable, batch_size, batch_sampler, where)
        _check_shuffle(shuffle, sampler, batch_sampler, where)
        if generator is not None:
            warnings.warn(
                f"{where}: generator= is ignored: order and worker seeds derive from seed="
                f"{seed}; pass seed= to change the stream",
                stacklevel=stacklevel + 1,
            )
        lookahead = _device.prefetch_option(device, device_prefetch, where)
        owns_sampler = (sampler is None and batch_sampler is None) or (
            reshard is not None and reshard.owns_sampler
        )
        if grown is not None and not (owns_sampler and sampler is None):
            raise ValueError(
                f"{where}: grown= declares the growths of the loader's own sampler; got it with "
                f"{'a sampler' if sampler is not None else 'a batch_sampler or IterableDataset'}"
                f"; pass grown= to seekdata.DistributedSampler(dataset, ..., grown=...) instead"
            )
        options = dict(
            num_workers=num_workers,
            # device= on CUDA: the engine pins (in torch's pin thread with workers), so the
            # copy ahead of the step is asynchronous
            pin_memory=pin_memory or (lookahead is not None and lookahead.pins),
            timeout=timeout,
            multiprocessing_context=multiprocessing_context,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        return cls(
            seed=seed,
            seed_explicit=seed_explicit,
            sampler=sampler,
            batch_sampler=batch_sampler,
            owns_sampler=owns_sampler,
            shuffle=shuffle,
            batch_size=batch_size,
            drop_last=drop_last,
            collate_fn=collate_fn,
            batch_transform=batch_transform,
            worker_init_fn=worker_init_fn,
            reseed=reseed,
            reseed_global_rng=reseed_as_given,
            step_rng=step_rng,
            batched_fetch=batched_fetch,
            snapshot_every_n_steps=snapshot_every_n_steps,
            grown=grown,
            lookahead=lookahead,
            options=options,
            reshard=reshard,
            worker_method=worker_method,
        )


def _check_shuffle(shuffle: Any, sampler: Any, batch_sampler: Any, where: str) -> None:
    """torch's rule: ``shuffle`` and a sampler of one's own are mutually exclusive."""
    if shuffle and (sampler is not None or batch_sampler is not None):
        which = "sampler" if sampler is not None else "batch_sampler"
        other = "shuffle" if sampler is not None else "batch_size, shuffle, sampler and drop_last"
        raise ValueError(
            f"{where}: {which} option is mutually exclusive with {other}; got shuffle="
            f"{shuffle!r} and a {which}; shuffle in the sampler (e.g. "
            f"seekdata.DistributedSampler(..., shuffle=True)) and leave shuffle unset here"
        )


def _check_batch_transform(
    batch_transform: Any, iterable: bool, batch_size: int | None, batch_sampler: Any, where: str
) -> None:
    """``batch_transform`` works on every path that makes batches, and is refused elsewhere."""
    if batch_transform is None:
        return
    if not callable(batch_transform):
        raise TypeError(
            f"{where}: batch_transform must be a callable (batch, rng) -> batch; got "
            f"{type(batch_transform).__name__}; pass e.g. seekdata.transforms.MixUp(0.2)"
        )
    if iterable:
        raise ValueError(
            f"{where}: batch_transform needs a map-style dataset (its randomness is keyed by "
            f"the batch's indices, which an IterableDataset does not have); got an "
            f"IterableDataset; apply the transform in the dataset or in the training loop"
        )
    if batch_size is None and batch_sampler is None:
        raise ValueError(
            f"{where}: batch_transform applies to batches, but batch_size=None loads single "
            f"samples without collating them; pass batch_size=, or transform each sample in "
            f"the dataset"
        )
