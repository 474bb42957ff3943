"""Model-side randomness for training loops: step RNG, and capture/restore of global RNG.

Per-step global RNG
-------------------
:func:`set_step_rng` seeds torch's CPU generator, every CUDA device's generator, numpy's
legacy global RNG and ``random`` from the hashed key ``(seed, step, rank)``. Called at the top
of every training step, it makes everything that draws from global RNG during the step
(``nn.Dropout``, ``torch.randn`` without a generator, ``random.random()`` in user code) a
pure function of the step: a resumed run reproduces it without saving any RNG state, and
nothing that touched global RNG before the step (a DataLoader ``iter()``, an evaluation, a
logging call) can shift it.

For randomness you write yourself, prefer the explicit form, which needs no global state::

    noise = torch.randn(shape, generator=seekdata.torch_generator(seed, step, rank))

The two never share a stream: :func:`set_step_rng` seeds from words 2..5 of the key, and
``torch_generator`` / ``numpy_generator`` of the same tuple use words 0..1.

Capturing RNG state
-------------------
When a trainer must carry global RNG state across a checkpoint instead (code between steps
that draws from it), :func:`capture_rng` returns this process's state as a dict that
``torch.save`` and ``torch.load(weights_only=True)`` accept, and :func:`restore_rng` puts it
back. RNG state is per rank: save one per rank, e.g. ``{f"rng/rank{r}": capture_rng()}`` or
a list gathered with ``torch.distributed.all_gather_object``; :func:`restore_rng` accepts
that list and takes this rank's entry.

:func:`set_step_rng` and :func:`base_torch_seed` live in :mod:`seekdata._core.steprng` (the
engines call them too); capture and restore live here.

Ending a DDP job
----------------
:func:`exit_ddp`, as a DDP script's last line, ends the rank as an ordinary exit would (the
process group destroyed, ``atexit`` handlers run, output flushed) but without the interpreter's
finalization, in which torch's gloo threads can abort a finished rank (SIGABRT,
pytorch/pytorch#190489).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from seekdata._core import dist as _dist
from seekdata._core.dist import exit_ddp
from seekdata._core.steprng import base_torch_seed, set_step_rng

__all__ = [
    "RNG_FORMAT",
    "base_torch_seed",
    "capture_rng",
    "exit_ddp",
    "restore_rng",
    "set_step_rng",
]

# --- capture / restore ------------------------------------------------------------------------

#: Format tag of :func:`capture_rng` states.
RNG_FORMAT = "seekdata.rng/1"

_MT_WORDS = 624  # MT19937 state words (numpy legacy and ``random``)
_U32 = 1 << 32


def capture_rng() -> dict[str, Any]:
    """This process's global RNG state: torch CPU, every CUDA device, numpy-legacy, ``random``.

    Only tensors, lists, dicts, ints, floats, strs and None, so ``torch.save`` of it loads
    with ``torch.load(path, weights_only=True)``. Keys: ``format`` (:data:`RNG_FORMAT`),
    ``rank`` (where it was captured), ``torch`` (uint8 tensor), ``cuda`` (one uint8 tensor per
    device, ``[]`` without CUDA), ``numpy`` and ``python`` (dicts of ints and lists).
    """
    _name, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    return {
        "format": RNG_FORMAT,
        "rank": _dist.rank_or_zero(),
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
        "numpy": {
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next},
    }


def restore_rng(state: Any, *, check_rank: bool = True) -> None:
    """Restore global RNG from :func:`capture_rng`'s dict, or from a list of them, one per rank
    (this rank's entry is used).

    Everything is validated before anything is set, so a bad state changes nothing. With
    ``check_rank`` (default) a state captured on another rank is refused: restoring rank 0's
    RNG on every rank is a silent, common bug.
    """
    where = "restore_rng"
    rank = _dist.rank_or_zero()
    if isinstance(state, list | tuple):
        if not 0 <= rank < len(state):
            raise ValueError(
                f"{where}: a list of states must hold one state per rank, indexed by rank; "
                f"got {len(state)} states on rank {rank}; gather one capture_rng() per rank, or "
                f"pass this rank's state"
            )
        state = state[rank]
        where = f"restore_rng (entry {rank} of the list)"
    if not isinstance(state, dict):
        raise TypeError(
            f"{where}: state must be the dict returned by seekdata.capture_rng(); got "
            f"{type(state).__name__}; pass capture_rng()'s result, or a list of them per rank"
        )
    missing = sorted({"format", "rank", "torch", "cuda", "numpy", "python"} - set(state))
    if missing:
        raise ValueError(
            f"{where}: state must have the keys of capture_rng(); {missing} missing from "
            f"keys {sorted(state)}; pass a dict saved from seekdata.capture_rng()"
        )
    if state["format"] != RNG_FORMAT:
        raise ValueError(
            f"{where}: state format must be {RNG_FORMAT!r}; got {state['format']!r}; "
            f"capture it with this version of seekdata.capture_rng()"
        )
    saved_rank = state["rank"]
    if check_rank and saved_rank != rank:
        raise ValueError(
            f"{where}: the state was captured on rank {saved_rank!r} but this is rank {rank}; "
            f"save one state per rank (e.g. {{f'rng/rank{{r}}': capture_rng()}}) and restore "
            f"each rank's own, or pass check_rank=False to restore it anyway"
        )
    cpu = _byte_tensor(state["torch"], "state['torch']", where)
    cuda = _cuda_states(state["cuda"], where)
    np_state = _numpy_state(state["numpy"], where)
    py_state = _python_state(state["python"], where)
    try:
        torch.set_rng_state(cpu)
    except RuntimeError as e:
        raise ValueError(
            f"{where}: state['torch'] must be a torch CPU generator state; torch refused it "
            f"({e}); pass a state captured by capture_rng()"
        ) from e
    if cuda:
        torch.cuda.set_rng_state_all(cuda)
    np.random.set_state(np_state)
    random.setstate(py_state)


def _byte_tensor(value: Any, label: str, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8 or value.dim() != 1:
        got = (
            f"tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
            if isinstance(value, torch.Tensor)
            else type(value).__name__
        )
        raise TypeError(
            f"{where}: {label} must be a 1-D uint8 tensor (a generator state); "
            f"got {got}; pass a state captured by capture_rng()"
        )
    return value.cpu()


def _cuda_states(value: Any, where: str) -> list[torch.Tensor]:
    if not isinstance(value, list | tuple):
        raise TypeError(
            f"{where}: state['cuda'] must be a list of uint8 tensors, one per CUDA device; got "
            f"{type(value).__name__}; pass a state captured by capture_rng()"
        )
    states = [_byte_tensor(v, f"state['cuda'][{i}]", where) for i, v in enumerate(value)]
    here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if states and len(states) != here:
        raise ValueError(
            f"{where}: state['cuda'] must hold one state per CUDA device of this process; it "
            f"holds {len(states)} and this process has {here}; run with the same visible "
            f"devices, or set state['cuda'] = [] to leave the CUDA generators as they are"
        )
    return states


def _int_list(value: Any, length: int, label: str, where: str) -> list[int]:
    if not isinstance(value, list | tuple):
        got = type(value).__name__
    elif len(value) != length:
        got = f"{len(value)} items"
    else:
        bad = [
            v for v in value if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _U32
        ]
        if not bad:
            return list(value)
        got = f"{len(bad)} items out of range or not ints, the first {bad[0]!r}"
    raise ValueError(
        f"{where}: {label} must be a list of {length} ints in [0, 2**32); got {got}; "
        f"pass a state captured by capture_rng()"
    )


def _field(value: Any, key: str, name: str, where: str) -> Any:
    if not isinstance(value, dict) or key not in value:
        raise ValueError(
            f"{where}: state[{name!r}] must be a dict with key {key!r}; got "
            f"{sorted(value) if isinstance(value, dict) else type(value).__name__}; "
            f"pass a state captured by capture_rng()"
        )
    return value[key]


def _numpy_state(value: Any, where: str) -> tuple[Any, ...]:
    keys = _int_list(
        _field(value, "keys", "numpy", where), _MT_WORDS, "state['numpy']['keys']", where
    )
    pos = _field(value, "pos", "numpy", where)
    has_gauss = _field(value, "has_gauss", "numpy", where)
    cached = _field(value, "cached_gaussian", "numpy", where)
    if not (isinstance(pos, int) and 0 <= pos <= _MT_WORDS and has_gauss in (0, 1)):
        raise ValueError(
            f"{where}: state['numpy'] must have pos in [0, {_MT_WORDS}] and has_gauss 0 or 1; "
            f"got pos={pos!r}, has_gauss={has_gauss!r}; pass a state captured by capture_rng()"
        )
    if not isinstance(cached, float | int) or isinstance(cached, bool):
        raise TypeError(
            f"{where}: state['numpy']['cached_gaussian'] must be a float; got "
            f"{type(cached).__name__}; pass a state captured by capture_rng()"
        )
    return ("MT19937", np.array(keys, dtype=np.uint32), pos, int(has_gauss), float(cached))


def _python_state(value: Any, where: str) -> tuple[Any, ...]:
    version = _field(value, "version", "python", where)
    internal = _int_list(
        _field(value, "internal", "python", where),
        _MT_WORDS + 1,
        "state['python']['internal']",
        where,
    )
    gauss_next = _field(value, "gauss_next", "python", where)
    if version != 3 or not (gauss_next is None or isinstance(gauss_next, float)):
        raise ValueError(
            f"{where}: state['python'] must have version 3 and gauss_next a float or None; got "
            f"version={version!r}, gauss_next={gauss_next!r}; pass a state captured by "
            f"capture_rng()"
        )
    return (version, tuple(internal), gauss_next)
