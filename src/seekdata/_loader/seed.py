"""Where a loader's seed comes from: ``seed=``, else torch's seed (rank 0's), else the checkpoint.

``seed=None`` derives the seed from torch's seed at construction — the ``generator``'s, as
torch's ``DataLoader`` would draw its order from it, else the program's torch seed
(``training.base_torch_seed``: not one that ``set_step_rng`` set since) — hashed
with a domain tag, never combined by arithmetic. In an initialised process group every rank
takes rank 0's value. A state loaded into such a loader brings its own seed, which wins: the
checkpoint decides, never the resumed process's torch seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from seekdata._core import dist as _dist
from seekdata._core import state as _state
from seekdata._core import streams as _streams
from seekdata._core.checks import is_state_int
from seekdata._core.steprng import base_torch_seed

_SEED_TAG = 0x53454544  # "SEED": key of the default seed derived from torch's seed


def default_seed(generator: Any, where: str) -> int:
    """The seed of a loader built with ``seed=None``. In an initialised process group this is
    a collective (every rank must build the loader, as every rank builds the DDP model)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{where}: generator must be a torch.Generator or None; got "
            f"{type(generator).__name__}; pass torch.Generator().manual_seed(s), or seed=s"
        )
    base = generator.initial_seed() if generator is not None else base_torch_seed()
    seed = _streams.derive_key(base, _SEED_TAG, words=1)[0] >> 1  # 63 bits: an int64 anywhere
    return _dist.agree_with_rank0(seed)


def seed_to_adopt(state: Any, current: int, *, explicit: bool, owns_sampler: bool) -> int:
    """The seed a loader takes from ``state``: the checkpoint's unless ``seed=`` was explicit
    (then a differing one is a mismatch that validation reports). An invalid field keeps
    ``current``, and validation names it."""
    if explicit or not isinstance(state, Mapping):
        return current
    sampler_state = state.get(_state.K_KIND) == "sampler"
    if sampler_state and not owns_sampler:
        return current  # a sampler state keys the user's sampler's order, not our samples
    value = state.get(_state.K_SEED if sampler_state else _state.K_SAMPLE_SEED)
    if not is_state_int(value) or value < 0:
        return current
    return value
