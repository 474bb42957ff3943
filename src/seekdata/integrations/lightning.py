"""Lightning: a callback that makes model-side randomness a function of the global step.

Lightning already keeps a seekdata loader's cursor: it saves ``state_dict()`` of a stateful train
loader in its checkpoint and restores it in ``fit(ckpt_path=...)``. It saves no global RNG
state, so Dropout after a resume draws differently. :class:`StepRNGCallback` seeds torch, numpy
and ``random`` global RNG from ``(seed, global step, rank)`` before the first batch of each
optimizer step (:func:`seekdata.set_step_rng`); with it, a resumed ``fit`` is bit-identical::

    trainer = lightning.Trainer(..., callbacks=[StepRNGCallback(seed=0)])

This module imports lightning; ``import seekdata`` never imports it.
"""

from __future__ import annotations

from typing import Any

import lightning

from seekdata._core.checks import check_counter
from seekdata._core.steprng import set_step_rng

__all__ = ["StepRNGCallback"]


class StepRNGCallback(lightning.Callback):
    """Calls :func:`seekdata.set_step_rng` with ``trainer.global_step`` before the first batch
    of every optimizer step (once per step under gradient accumulation: the micro-batches of a
    step draw one after another from the step's stream)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = check_counter(seed, "seed", "StepRNGCallback")
        self._seeded: int | None = None  # the step whose stream is current

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step != self._seeded:
            set_step_rng(self.seed, step)
            self._seeded = step
