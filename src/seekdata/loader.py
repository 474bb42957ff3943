"""StatefulDataLoader: torch's DataLoader as the engine, a cursor as the state.

The loader plans each epoch from a seekable sampler's cursor, hands the engine
:class:`~seekdata._loader.plan.PlannedBatch` objects (indices plus counters), and advances the
cursor only for batches it has handed to the caller. Resume is an O(1) seek: nothing is replayed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch.utils.data

from seekdata._core.checks import check_bool, check_int
from seekdata._core.growth import Growth
from seekdata._loader import device as _device
from seekdata._loader.config import ARGUMENTS, RECHECKED, LoaderConfig
from seekdata._loader.engines import Engine, build
from seekdata._loader.engines.seekable import SeekableEngine
from seekdata._loader.torch_api import FORWARDED, FROZEN, check_worker_method

__all__ = ["StatefulDataLoader"]

_T_co = TypeVar("_T_co", covariant=True)


class StatefulDataLoader(torch.utils.data.DataLoader[_T_co]):
    """A drop-in for ``torch.utils.data.DataLoader`` and torchdata's ``StatefulDataLoader``.

    It is a ``DataLoader`` subclass, so frameworks' ``isinstance`` checks pass, and it keeps
    the attributes they read (``dataset``, ``batch_size``, ``sampler``, ``num_workers``, ...),
    but it never runs ``DataLoader.__init__`` or its iterator: the engine is a separate
    ``DataLoader`` over keyed batches, and iteration goes through the cursor.

    Adds ``seed`` (keys every sample's and batch's randomness; None: derived from torch's seed
    and replaced by the checkpoint's at ``load_state_dict``), ``reseed_global_rng`` (seed
    torch/numpy/``random`` global RNG per sample; ``False`` when the dataset only uses
    :func:`seekdata.sample_rng`, or the names of the generators it uses, e.g.
    ``("torch", "numpy")``) and ``batch_transform`` (a ``(batch, rng) -> batch`` callable
    applied after collation, e.g. MixUp) and ``step_rng`` (on by default: each batch handed out
    seeds the caller's global RNG — torch CPU and CUDA, numpy, ``random`` — from (seed, epoch,
    step, rank) with :func:`seekdata.set_step_rng`, so Dropout and other model-side draws in
    the step that follows resume exactly; ``False`` leaves global RNG to you, untouched),
    ``batched_fetch`` (on by default: a dataset with a batched read of its own, ``__getitems__``,
    reads each batch in one call under the batch's counters, as torch calls it; ``False``
    fetches each sample with ``__getitem__`` under its own key; docs/randomness.md),
    ``device`` (None: off; e.g. ``"cuda"``: each batch arrives already on that device, its copy
    started ``device_prefetch`` batches ahead from pinned memory on a side CUDA stream, so it
    overlaps the steps before; ``"cpu"``: no copy, the same look-ahead; a device this machine
    lacks is a ValueError) and ``device_prefetch`` (batches moved ahead, >= 1; each costs a
    batch of device memory). The cursor counts only batches handed out, never those ahead.
    ``grown`` declares how an append-only dataset grew (a list of :class:`seekdata.Growth`,
    as ``seekdata inspect`` prints them; ``load_state_dict(state, grow=True)`` records a new
    one): docs/growth.md. ``state_dict()`` is a cursor;
    ``load_state_dict()``
    is O(1) and accepts another ``num_workers`` or world size. ``snapshot_every_n_steps`` is
    torchdata's: accepted and stored; a cursor is exact at every step whatever its value (it is
    passed on to torchdata for iterable datasets). ``worker_method`` is torch's:
    ``"multiprocessing"`` (the default) runs ``num_workers`` worker processes, ``"thread"`` runs
    them as threads of this process — the same batches and the same state (a checkpoint moves
    between the two), no copy of the dataset per worker; a dataset must then draw its
    randomness from seekdata's streams, and a draw from a global generator raises
    (docs/threads.md).
    """

    # the attributes seekdata adds to torch's, set from the config by ARGUMENTS (types only)
    reseed_global_rng: bool | tuple[str, ...]
    batch_transform: Callable[[Any, np.random.Generator], Any] | None
    snapshot_every_n_steps: int | None
    step_rng: bool
    batched_fetch: bool
    device: torch.device | None
    device_prefetch: int
    worker_method: str

    def __init__(
        self,
        dataset: torch.utils.data.Dataset[_T_co],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        seed: int | None = None,
        reseed_global_rng: bool | Collection[str] = True,
        batch_transform: Callable[[Any, np.random.Generator], Any] | None = None,
        snapshot_every_n_steps: int | None = 1,
        step_rng: bool = True,
        batched_fetch: bool = True,
        device: str | torch.device | None = None,
        device_prefetch: int = 1,
        grown: Sequence[Growth] | None = None,
        worker_method: str = "multiprocessing",
    ) -> None:
        given = locals()  # the arguments, as passed: config.ARGUMENTS lists them, in order
        config = LoaderConfig.from_args(dataset, given, where="StatefulDataLoader")
        # torch's attributes, as frameworks read them (the engines read the config); in the
        # list's order: num_workers before multiprocessing_context, whose torch setter reads it
        self.dataset = dataset
        for argument in ARGUMENTS:
            if argument.attribute:
                setattr(self, argument.name, getattr(config, argument.name))
        self._engine: Engine
        self._engine, self.collate_fn = build(dataset, config)
        self._engine.lookahead = config.lookahead
        if config.assign_rank is not None:  # the cursor is a global position: it stays there
            self._engine.assign_rank(config.assign_rank.world, config.assign_rank.rank)
        self._initialized = True

    # --- torch's attribute rules ----------------------------------------------------------------

    def __setattr__(self, attr: str, val: Any) -> None:
        if not self.__dict__.get("_initialized", False):
            super().__setattr__(attr, val)
            return
        if attr in FROZEN:
            raise ValueError(
                f"{attr} attribute should not be set after {type(self).__name__} is "
                f"initialized: it defines the stream (torch refuses it too); got {attr}="
                f"{val!r}; build a new loader with it"
            )
        if attr == "worker_method":  # read at every iter(), as torch's FORWARDED ones
            context = self.multiprocessing_context
            val = check_worker_method(val, context, type(self).__name__)
            if val == "thread" and isinstance(self.dataset, torch.utils.data.IterDataPipe):
                raise ValueError(
                    f"{type(self).__name__}: worker_method='thread' runs an IterableDataset in "
                    f"threads of one process, but a DataPipe is reseeded per worker process by "
                    f"torch; got {type(self.dataset).__name__}; keep "
                    f"worker_method='multiprocessing'"
                )
        if attr == "multiprocessing_context" and val is not None:
            check_worker_method(self.worker_method, val, type(self).__name__)
        if attr == "seed":
            raise ValueError(
                f"seed attribute should not be set after {type(self).__name__} is initialized: "
                f"it keys the stream, and a checkpoint's seed is adopted by load_state_dict; "
                f"got seed={val!r}; build a new loader with seed={val!r}"
            )
        if attr in RECHECKED:  # the argument's own check, as at construction
            val = RECHECKED[attr].check(val, type(self).__name__)
        if attr == "step_rng":  # read at every iter(), as torch's FORWARDED ones
            self._engine.step_rng = val
        if attr in ("device", "device_prefetch"):  # read at every iter(), as step_rng
            device = val if attr == "device" else self.device
            depth = val if attr == "device_prefetch" else self.device_prefetch
            lookahead = _device.prefetch_option(device, depth, type(self).__name__)
            self._engine.lookahead = lookahead
            if attr == "device":
                val = None if lookahead is None else lookahead.device
        super().__setattr__(attr, val)  # multiprocessing_context: torch's validating setter
        if attr in FORWARDED:  # torch reads these at iter(): so does the engine
            self._engine.set_option(attr, getattr(self, attr))

    # --- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # not torch's iterator class
        return self._engine.iterate()

    def __len__(self) -> int:
        """Batches in a full epoch on this rank, as torch's DataLoader counts them."""
        return self._engine.full_len()

    def set_epoch(self, epoch: int) -> None:
        """Same rules as ``DistributedSampler.set_epoch``: keeps the position of a restored
        epoch; an epoch below the restored one is obeyed, with a warning naming both."""
        self._engine.set_epoch(epoch)

    def skip(self, batches: int) -> None:
        """Move the cursor by ``batches`` global batches (back when negative) in O(1), across
        epoch ends: the next ``iter()`` continues exactly where the uninterrupted run was that
        many steps later (or earlier). Every epoch counts ``len(loader)`` batches; a move lands
        on the epoch's own partition. An iterator from before stops (as after
        ``load_state_dict``). Needs a seekable sampler."""
        self._engine.skip(batches)

    def skip_to(self, batch: int) -> None:
        """Move the cursor to batch ``batch`` of the epoch the next ``iter()`` runs, counted
        from that epoch's start on this rank (the epoch-end rules decide which epoch): where
        ``skip`` moves relative to the cursor, this lands on the same batch wherever the cursor
        was, so a restored state followed by ``skip_to(k)`` does not skip twice. It is what
        accelerate's ``skip_first_batches(loader, k)`` means
        (:func:`seekdata.integrations.accelerate.skip_first_batches` calls it). O(1) with a
        seekable sampler; with another sampler the next ``iter()`` replays ``batch`` batches of
        indices. An iterator from before stops."""
        where = "StatefulDataLoader.skip_to"
        self._engine.seek_batch(check_int(batch, "batch", where, 0))

    def skip_steps(self, start: int, stop: int) -> None:
        """Never hand out the global steps ``[start, stop)`` (a global step is
        ``epoch * len(loader) + step in the epoch``): the stream jumps over them when it gets
        there, and every later step is the uninterrupted run's. Recorded in ``state_dict()``,
        so a later resume keeps the skip. An iterator from before stops; call ``iter()``."""
        self._engine.skip_steps(start, stop)

    # --- what frameworks read -------------------------------------------------------------------

    @property
    def sampler(self) -> Any:  # type: ignore[override]  # read-only, as torch guards it
        """The sampler the loader draws from (its own ``DistributedSampler`` by default)."""
        return self._engine.sampler

    @property
    def batch_sampler(self) -> Any:  # type: ignore[override]  # read-only, as torch guards it
        """torch's meaning: the batches of indices (None for ``batch_size=None``); read-only."""
        return self._engine.batch_sampler

    @property
    def seekable(self) -> bool:
        """Whether the cursor seeks in O(1) (a seekdata sampler over a map-style dataset):
        resume, skip and resharding need no replay."""
        return isinstance(self._engine, SeekableEngine)

    def assign_rank(self, num_replicas: int, rank: int) -> None:
        """Become rank ``rank`` of ``num_replicas`` ranks: what a framework that shards loaders
        calls (accelerate's ``prepare``, Lightning's DDP). The cursor is a global position, so
        it stays where it is, and the stream goes on as the same global stream. Needs a seekable
        sampler built single-process (or already on that rank) for more than one rank. (Not a
        shard of data: a rank's part of the one global stream.) This is seekdata's name for a
        rank change (the engines' too); :meth:`shard` is its alias, and the sampler's own step
        is ``DistributedSampler.reshard``."""
        self._assign_rank(num_replicas, rank, "StatefulDataLoader.assign_rank")

    def shard(self, num_replicas: int, rank: int) -> None:
        """An alias of :meth:`assign_rank` (the name), kept for frameworks and code that call
        it: the same rank change, its messages saying ``shard``."""
        self._assign_rank(num_replicas, rank, "StatefulDataLoader.shard")

    def _assign_rank(self, num_replicas: int, rank: int, where: str) -> None:
        num_replicas = check_int(num_replicas, "num_replicas", where, 1)
        rank = check_int(rank, "rank", where, 0)
        sampler, world = self.sampler, getattr(self.sampler, "num_replicas", 1)
        if (world, getattr(sampler, "rank", 0)) == (num_replicas, rank):
            return  # already so
        if not self.seekable or self.batch_sampler is None:
            if num_replicas > 1 or world > 1:
                what = "an IterableDataset" if self.sampler is None else "this sampler"
                raise ValueError(
                    f"{where}: seekdata can shard only its own sampler across {num_replicas} "
                    f"processes; got {what} ({type(sampler).__name__}, batch_sampler "
                    f"{type(self.batch_sampler).__name__}); build the loader with shuffle= or "
                    f"sampler=seekdata.DistributedSampler(dataset), without batch_sampler="
                )
            return
        if world != 1:
            raise ValueError(
                f"{where}: the loader's sampler is rank {sampler.rank} of {world} but this "
                f"process is rank {rank} of {num_replicas}; build the sampler with "
                f"num_replicas={num_replicas}, rank={rank}, or leave it single-process and let "
                f"the framework shard it"
            )
        self._engine.assign_rank(num_replicas, rank)

    def place(self, move: Callable[[Any], Any] | None) -> None:
        """Hand out each batch as ``move(batch)`` (e.g. accelerate's ``send_to_device``), or as
        it is with None: what a framework that places batches on a device calls. For a copy to
        the GPU that overlaps the step, ``device=`` does it ahead of the step instead."""
        if move is not None and not callable(move):
            raise TypeError(
                f"StatefulDataLoader.place: move must be a callable batch -> batch or None; got "
                f"{type(move).__name__}; pass e.g. functools.partial(send_to_device, device=d)"
            )
        self._engine.place = move

    @property
    def _is_accelerate_prepared(self) -> bool:
        """Read by ``Accelerator.prepare_data_loader``; True hands this loader back unrebuilt,
        after the hook assigns its rank and places its batches (the ``"prepared"`` event of
        :mod:`seekdata.integrations.hooks`: only accelerate's own prepare asking gets True; the
        frame says who asks)."""
        if self._prepared:
            return True
        from seekdata.integrations import hooks  # the framework table: lazily, never at import

        return bool(hooks.consult("prepared", sys._getframe(1), self))

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:  # accelerate marks what it prepared
        self._prepared = bool(value)

    # accelerate's save_state / load_state save a prepared loader's state_dict() when this is set
    use_stateful_dataloader = True
    _prepared = False

    # --- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The cursor: JSON-native, a few hundred bytes, identical on every rank. Counts only
        batches already handed to the caller, never prefetched ones. No IPC."""
        return self._engine.state_dict()

    def load_state_dict(self, state: Any, strict: bool = True, *, grow: bool = False) -> None:
        """Restore the cursor in O(1), validating the whole state before changing anything.

        Any ``num_workers``; any world size with a seekable sampler. As in torchdata, it may be
        called while an iterator exists: the next ``iter()`` starts from the loaded state (the
        old iterator stops counting and raises if used). With ``seed=None`` the checkpoint's
        seed is adopted. ``grow=True`` declares that the dataset grew (append-only) since the
        checkpoint: its new items join the current epoch at once, nothing consumed comes back,
        and every later state records the growth."""
        self._engine.load_state_dict(state, strict, check_bool(grow, "grow", "load_state_dict"))

    @property
    def seed(self) -> int:
        """The seed keying every sample's and batch's randomness: ``seed=``, else derived from
        torch's seed at construction and replaced by a loaded checkpoint's. Read-only: the
        loader, its config and its engine share it (one object)."""
        return self._engine.keys.seed
