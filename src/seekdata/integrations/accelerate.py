"""accelerate: ``accelerator.prepare(model, optimizer, loader)`` with a seekdata loader.

accelerate rebuilds every ``DataLoader`` it prepares into its own ``DataLoaderShard`` over
``loader.dataset`` and ``loader.batch_sampler``: a plain torch loader that would fetch the right
indices without seekdata's per-sample randomness and without a cursor. A seekdata loader is
therefore handed back *unrebuilt*: ``StatefulDataLoader._is_accelerate_prepared`` (the flag
accelerate itself reads to avoid wrapping a loader twice) answers through the hook in
:mod:`seekdata.integrations.hooks` (its ``"prepared"`` event), which

- shards the loader across accelerate's processes the way seekdata shards (rank r of W takes
  every W-th global position; ``loader.assign_rank``), so a 2-process run neither loses nor
  repeats a sample;
- moves batches to ``accelerator.device`` when accelerate would (``device_placement``;
  ``loader.place``);
- refuses the options it cannot honour exactly (``split_batches``, ``dispatch_batches``, a
  device mesh), naming the recipe that works.

``accelerator.save_state`` / ``load_state`` then save and restore the loader's cursor (the loader
sets ``use_stateful_dataloader``, the flag accelerate reads for that), and the global RNG state
accelerate saves per process covers model-side randomness. :func:`skip_first_batches` is the
O(1) seek; accelerate's own would rebuild the loader, so it fails loudly instead.

This module imports accelerate; ``import seekdata`` never imports it.
"""

from __future__ import annotations

from typing import Any

import accelerate

from seekdata.loader import StatefulDataLoader

__all__ = ["skip_first_batches"]


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
    dataloader.skip_to(num_batches)  # the epoch the next iter() runs: the cursor's rules decide
    return dataloader
