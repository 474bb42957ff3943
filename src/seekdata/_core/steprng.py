"""Step RNG: seed global RNG at the top of a training step from the hashed key
``(seed, step, rank)``, and remember the seed torch had before, so a loader built with
``seed=None`` does not depend on how many steps ran before it.

The engines call :func:`set_step_rng` (a loader's ``step_rng``) and the loader's seed rule
reads :func:`base_torch_seed`; the user's entry point is :mod:`seekdata.training`, which
re-exports both.
"""

from __future__ import annotations

import torch

from seekdata._core import dist as _dist
from seekdata._core.checks import check_counter
from seekdata._core.globalrng import seed_globals
from seekdata._core.rngkeys import key_words

__all__ = ["base_torch_seed", "set_step_rng"]

# Words of derive_key(seed, step, rank, words=6) used by set_step_rng. Words 0 and 1 are the
# key that torch_generator / numpy_generator derive from the same tuple; skipping them keeps
# the global stream independent of the explicit one. Distinct words per RNG keep torch's CPU
# mt19937 (which uses the low 32 bits of its seed) and numpy's legacy MT19937 (32-bit seed)
# from ever starting in the same state.
_STEP_WORDS = 6
_W_TORCH, _W_CUDA, _W_NUMPY, _W_PYTHON = 2, 3, 4, 5


_base_seed: int | None = None  # torch's seed before set_step_rng last replaced it
_step_seeded: int | None = None  # torch's seed as set_step_rng left it


def base_torch_seed() -> int:
    """torch's seed as the program set it: ``torch.initial_seed()``, unless
    :func:`set_step_rng` (a loader's ``step_rng`` included) replaced it since, then the seed
    torch had before. A loader built with ``seed=None`` derives its seed from this, so it does
    not depend on how many steps ran before it was built."""
    current = torch.initial_seed()
    if _base_seed is not None and current == _step_seeded:
        return _base_seed
    return current


def set_step_rng(seed: int, step: int, *, rank: int | None = None) -> None:
    """Seed torch (CPU and every CUDA device), numpy-legacy and ``random`` global RNG from
    the hashed key ``(seed, step, rank)``.

    Call it at the top of every training step: dropout masks and any other draw from global
    RNG inside the step become a pure function of ``(seed, step, rank)``, equal in a resumed
    run and different on every rank. ``rank`` defaults to the process group's rank, then
    ``RANK``, else 0. Costs some 25-40 µs per new step, about half of it hashing the key
    (``benchmarks/step_rng.py``); it never calls ``torch.manual_seed`` (~160 µs).

    >>> set_step_rng(0, 5, rank=0); a = torch.rand(2)
    >>> set_step_rng(0, 5, rank=0); bool(torch.equal(a, torch.rand(2)))
    True
    """
    seed = check_counter(seed, "seed", "set_step_rng")
    step = check_counter(step, "step", "set_step_rng")
    rank = _dist.rank_or_zero() if rank is None else check_counter(rank, "rank", "set_step_rng")
    key = key_words(seed, (step, rank), _STEP_WORDS)
    global _base_seed, _step_seeded
    current = torch.initial_seed()
    if current != _step_seeded:  # the seed torch had from someone else: the base seed
        _base_seed = current
    # numpy's legacy seed takes 32 bits
    seed_globals((key[_W_TORCH], key[_W_NUMPY] >> 32, key[_W_PYTHON]))
    _step_seeded = torch.initial_seed()
    if torch.cuda.is_available():
        # Lazy until CUDA is initialised, then every device's default generator.
        torch.cuda.manual_seed_all(key[_W_CUDA])
