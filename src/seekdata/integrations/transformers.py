"""HF transformers: a ``Trainer`` whose ``train(resume_from_checkpoint=...)`` is exact.

Change one line of a ``Trainer`` script::

    from seekdata.integrations.transformers import Trainer   # was: from transformers import Trainer

and the training data comes from a :class:`seekdata.StatefulDataLoader` (shuffled with
``args.data_seed``, else ``args.seed``; a sample's augmentation keyed by the sample), every
checkpoint folder gets the loader's cursor (``seekdata_loader.json``), and each optimizer step
starts with :func:`seekdata.set_step_rng` of ``(args.seed, global step, rank)``, so Dropout and
any other draw from global RNG inside a step is a pure function of the step.

Resuming mid-epoch, the Trainer still "skips" the batches it already trained on, with
accelerate's ``skip_first_batches``: that rebuild goes through an adapter that skips indices
only (no data is read) and then hands out the seekdata loader's batches from its restored
cursor, so the Trainer's own step counting stays as it is. ``ignore_data_skip=True`` keeps its
meaning: the resumed epoch restarts from its first batch.

A subclass may override ``get_train_dataloader()`` and return its own
:class:`seekdata.StatefulDataLoader` (its sampler, collate function, dataset wrapper): the
override's result is restored, saved and skipped like the built-in loader. Any other loader
(a torch ``DataLoader``) is refused with a ``TypeError``: its resume could not be exact.

This module imports transformers; ``import seekdata`` never imports it.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from typing import Any

import torch.utils.data
import transformers
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from seekdata._core import state as _state
from seekdata._core.state import StateMismatchError
from seekdata._core.steprng import set_step_rng
from seekdata.loader import StatefulDataLoader

__all__ = ["STATE_FILE", "StepRNGCallback", "Trainer"]

STATE_FILE = "seekdata_loader.json"  # the loader's cursor, in each checkpoint-<step> folder


class StepRNGCallback(transformers.TrainerCallback):
    """Seeds global RNG from ``(seed, global step, rank)`` at the start of every optimizer step
    (:func:`seekdata.set_step_rng`): Dropout becomes a function of the step, so a resumed run
    draws what the uninterrupted one drew, whatever touched global RNG in between."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        set_step_rng(self.seed, state.global_step)


class _SaveCursor(transformers.TrainerCallback):
    """Writes the loader's cursor into the checkpoint folder the Trainer just saved."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = self.trainer._seekdata_loader
        if loader is None or not state.is_world_process_zero:  # the cursor is the same on all
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if os.path.isdir(folder):
            with open(os.path.join(folder, STATE_FILE), "w") as f:
                json.dump(loader.state_dict(), f)


class Trainer(transformers.Trainer):
    """``transformers.Trainer`` with a seekdata training loader: exact resume, nothing replayed.

    Same constructor and methods. Adds no arguments: the loader takes the Trainer's own
    (``per_device_train_batch_size``, ``dataloader_num_workers``, ``dataloader_drop_last``,
    ``data_collator``, ...). With several processes, ``accelerator.prepare`` shards it (see
    :mod:`seekdata.integrations.accelerate`). A subclass's ``get_train_dataloader()`` may
    return its own seekdata loader instead; it is trained on as returned (not sharded).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own ``get_train_dataloader`` is adapted like the built-in one."""
        super().__init_subclass__(**kwargs)
        override = cls.__dict__.get("get_train_dataloader")
        if override is not None:
            cls.get_train_dataloader = _adapting(override)  # type: ignore[method-assign]  # wraps it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seekdata_loader: StatefulDataLoader | None = None
        self._seekdata_resume: str | None = None
        self.add_callback(StepRNGCallback(self.args.seed))
        self.add_callback(_SaveCursor(self))

    def train(
        self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """``transformers.Trainer.train``; notes which checkpoint the loader resumes from."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        self._seekdata_resume = checkpoint if isinstance(checkpoint, str) else None
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def get_train_dataloader(self) -> Any:
        """The seekdata loader, prepared by accelerate and restored from the checkpoint."""
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        args, dataset, collator = self.args, self.train_dataset, self.data_collator
        if transformers.utils.is_datasets_available():
            import datasets

            if isinstance(dataset, datasets.Dataset):
                dataset = self._remove_unused_columns(dataset, description="Training")
            else:
                collator = self._get_collator_with_removed_columns(collator, "Training")
        else:
            collator = self._get_collator_with_removed_columns(collator, "Training")
        options: dict[str, Any] = dict(
            batch_size=self._train_batch_size,
            collate_fn=collator,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor,
            seed=args.data_seed if args.data_seed is not None else args.seed,
        )
        if args.dataloader_multiprocessing_context is not None:
            options["multiprocessing_context"] = args.dataloader_multiprocessing_context
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            options.update(shuffle=True, drop_last=args.dataloader_drop_last)
        return self._adapt(self.accelerator.prepare(StatefulDataLoader(dataset, **options)))

    def _adapt(self, loader: Any) -> _TrainerLoader:
        """The training loader as the Trainer iterates it: restored from the checkpoint the
        run resumes from, its cursor saved with every checkpoint, its skip reading no data."""
        if isinstance(loader, _TrainerLoader):  # an override returned super()'s
            return loader
        if not isinstance(loader, StatefulDataLoader):
            raise TypeError(
                f"seekdata Trainer: get_train_dataloader must return a "
                f"seekdata.StatefulDataLoader (its cursor is what the checkpoint saves and the "
                f"resume restores); got {type(loader).__module__}.{type(loader).__qualname__}; "
                f"build your loader as seekdata.StatefulDataLoader with the same arguments "
                f"(dataset, batch_size, sampler, collate_fn, ...), or subclass "
                f"transformers.Trainer if this run need not resume exactly"
            )
        resume = self._seekdata_resume
        if resume is not None and not self.args.ignore_data_skip:
            path = os.path.join(resume, STATE_FILE)
            _check_saved(os.path.isfile(path), resume, STATE_FILE, "seekdata Trainer")
            with open(path) as f:
                loader.load_state_dict(json.load(f))
        self._seekdata_loader = loader
        return _TrainerLoader(loader)


def _adapting(get_train_dataloader: Any) -> Any:
    """A subclass's ``get_train_dataloader``, its result adapted by :meth:`Trainer._adapt`."""

    @functools.wraps(get_train_dataloader)
    def adapted(self: Trainer, *args: Any, **kwargs: Any) -> _TrainerLoader:
        return self._adapt(get_train_dataloader(self, *args, **kwargs))

    return adapted


def _first(batch: list[Any]) -> Any:
    return batch[0]


class _Batches(torch.utils.data.Dataset):
    """The adapter's dataset: "fetching" placeholder ``[p]`` hands out the loader's next batch,
    after checking that the loader's cursor is at batch p of the epoch."""

    def __init__(self, loader: StatefulDataLoader) -> None:
        self.loader = loader
        self.it: Iterator[Any] | None = None

    def __len__(self) -> int:  # the Trainer counts examples with len(dataloader.dataset)
        return len(self.loader.dataset)  # type: ignore[arg-type]  # map-style: the loader checked

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, placeholder: list[int]) -> list[Any]:
        if self.it is None:
            self.it = iter(self.loader)
            at = self.loader.state_dict().get(_state.K_STEP)
            _check_resume_batch(placeholder[0], at, "seekdata Trainer")
        return [next(self.it)]


class _Placeholders(torch.utils.data.Sampler[list[int]]):
    """The adapter's batch sampler: ``[0], [1], ...`` — one placeholder per batch of the epoch,
    so accelerate's ``SkipBatchSampler`` skips numbers, not data."""

    def __init__(self, batches: _Batches) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[list[int]]:
        self.batches.it = None
        return ([p] for p in range(len(self.batches.loader)))

    def __len__(self) -> int:
        return len(self.batches.loader)


class _TrainerLoader:
    """What the Trainer iterates: the seekdata loader, plus what accelerate's
    ``skip_first_batches`` reads to rebuild a loader (an adapter that reads no skipped data)."""

    # read by accelerate's skip_first_batches for the rebuilt loader: one batch per fetch
    sampler = None
    num_workers, pin_memory, timeout, prefetch_factor = 0, False, 0, None
    worker_init_fn = multiprocessing_context = generator = None
    persistent_workers, pin_memory_device = False, ""
    collate_fn = staticmethod(_first)

    def __init__(self, loader: StatefulDataLoader) -> None:
        self.loader = loader
        self.dataset = _Batches(loader)
        self.batch_sampler = _Placeholders(self.dataset)
        self.batch_size, self.drop_last = loader.batch_size, loader.drop_last

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.loader.load_state_dict(state)


def _check_saved(exists: bool, checkpoint: str, file: str, where: str) -> None:
    """A framework resumes from ``checkpoint``: it must hold the loader's state ``file``."""
    if not exists:
        raise StateMismatchError(
            f"{where}: the checkpoint {checkpoint} has no {file}, so the loader's position is "
            f"unknown; resume from a checkpoint this Trainer saved, or pass "
            f"ignore_data_skip=True to restart the epoch"
        )


def _check_resume_batch(framework: int, loader: int | None, where: str) -> None:
    """A framework resumes at batch ``framework`` of the epoch: the restored loader's cursor
    (``loader``; None: it keeps no batch count) must be there too."""
    if loader is not None and loader != framework:
        raise StateMismatchError(
            f"{where}: the Trainer resumes at batch {framework} of the epoch but the loader's "
            f"cursor is at batch {loader}; resume with the same batch size, gradient "
            f"accumulation and number of processes as the checkpoint, or pass "
            f"ignore_data_skip=True to restart the epoch"
        )
