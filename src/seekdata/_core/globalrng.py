"""The process-global generators seekdata reseeds: :func:`seed_globals`, the one place that
seeds them, and a cheap save/restore of them.

Every path that sets global RNG (a sample's fetch, a batch's collation, an iterable
dataset's worker, :func:`seekdata.set_step_rng`, ``transforms.from_global_rng``, a
:class:`seekdata.Mixture` source) derives a row ``(torch, numpy, random)`` of seeds from its
key (see :data:`seekdata.rng.STREAMS`) and hands it to :func:`seed_globals`. numpy's legacy
seed takes 32 bits, so the row's numpy entry is already below ``2**32``.

Which generators: :data:`GENERATORS` (torch's CPU default generator, numpy's legacy global
``RandomState``, Python's ``random``); a loader reseeds all of them by default, or the subset
its ``reseed_global_rng`` names.

Saving and restoring the caller's state around a batch (``num_workers=0``) through the public
getters costs ~60 µs a batch, almost all of it numpy's ``get_state``/``set_state`` copying 624
words one by one, and ``random.getstate`` building 625 ints. Here both states are copied as raw
bytes instead: numpy's through its public ``bit_generator.ctypes.state_address``, ``random``'s
from the CPython object (the one place seekdata reads an interpreter's object layout, for want
of any public bulk accessor). Each layout is checked once per process against the public
getter and, if it does not match (another numpy, another interpreter), the public getters are
used: slower, never wrong.
"""

from __future__ import annotations

import _random
import ctypes
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

#: The global generators a loader can reseed per sample, in the order of a seed row.
GENERATORS = ("torch", "numpy", "random")

_MT_WORDS = 624
_NP_STATE_BYTES = 4 * _MT_WORDS + 4  # numpy's mt19937_state: uint32 key[624]; int pos
_PY_OFFSET = object.__basicsize__  # CPython's RandomObject: PyObject_HEAD; int index; state[624]
_PY_STATE_BYTES = 4 + 4 * _MT_WORDS


def reseed_set(value: Any, where: str) -> tuple[str, ...]:
    """Validate ``reseed_global_rng``: ``True`` (all of :data:`GENERATORS`), ``False`` (none) or
    a collection of generator names. Returns the names in :data:`GENERATORS` order."""
    if isinstance(value, bool | np.bool_):
        return GENERATORS if value else ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(
            f"{where}: reseed_global_rng must be a bool or a collection of generator names "
            f"from {GENERATORS}; got {type(value).__name__} {value!r}; pass e.g. "
            f"reseed_global_rng=('torch', 'numpy')"
        )
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                f"{where}: reseed_global_rng names must be str; got {type(name).__name__} "
                f"{name!r} in {value!r}; pass names from {GENERATORS}"
            )
        if name not in GENERATORS:
            raise ValueError(
                f"{where}: reseed_global_rng names must be among {GENERATORS}; got {name!r}; "
                f"pass e.g. reseed_global_rng=('torch', 'numpy')"
            )
    return tuple(g for g in GENERATORS if g in names)


# --- numpy's legacy global RandomState ---------------------------------------------------------

_np_rand: Any = getattr(np.random.mtrand, "_rand")  # noqa: B009  # the RandomState behind np.random
_np_layout_ok: bool | None = None


def _np_address() -> int | None:
    """The address of the global MT19937 state when it can be copied as bytes, else None."""
    global _np_layout_ok
    bitgen = _np_rand._bit_generator
    if type(bitgen) is not np.random.MT19937:  # np.random.set_bit_generator was called
        return None
    address = int(bitgen.ctypes.state_address)
    if _np_layout_ok is None:
        probe = np.random.MT19937(12345)
        probe.random_raw(700)  # a position away from 0
        state = probe.state["state"]
        raw = ctypes.string_at(int(probe.ctypes.state_address), _NP_STATE_BYTES)
        _np_layout_ok = raw == state["key"].astype("<u4").tobytes() + int(state["pos"]).to_bytes(
            4, sys.byteorder, signed=True
        )
    return address if _np_layout_ok else None


def _np_save() -> Any:
    """numpy's global state, leaving the generator in an unspecified state (about to be
    reseeded). A cached normal (``has_gauss``) is read with one draw: a draw that returns the
    cached value leaves the Mersenne Twister where it was."""
    address = _np_address()
    if address is None:
        return np.random.get_state()
    before = ctypes.string_at(address, _NP_STATE_BYTES)
    normal = _np_rand.standard_normal()
    cached = ctypes.string_at(address, _NP_STATE_BYTES) == before
    return (address, before, normal if cached else None)


def _np_restore(saved: Any) -> None:
    if not (isinstance(saved, tuple) and isinstance(saved[0], int)):
        np.random.set_state(saved)
        return
    address, raw, normal = saved
    if normal is not None:  # a cached normal: only the public setter writes it back
        key = np.frombuffer(raw, dtype=np.uint32, count=_MT_WORDS)
        pos = int.from_bytes(raw[4 * _MT_WORDS :], sys.byteorder, signed=True)
        np.random.set_state(("MT19937", key, pos, 1, normal))
        return
    _np_rand.seed(0)  # resets the cached normal; the state itself is overwritten next
    ctypes.memmove(address, raw, _NP_STATE_BYTES)


# --- Python's random ---------------------------------------------------------------------------

_py_inst: Any = getattr(random, "_inst")  # noqa: B009  # the instance behind random.random()
_py_layout_ok: bool | None = None


def _py_layout() -> bool:
    global _py_layout_ok
    if _py_layout_ok is None:
        probe = random.Random(12345)
        probe.random()
        ok = (
            type(_py_inst) is random.Random
            and sys.implementation.name == "cpython"
            and (type(probe).__mro__[1].__basicsize__ >= _PY_OFFSET + _PY_STATE_BYTES)
        )
        if ok:
            raw = ctypes.string_at(id(probe) + _PY_OFFSET, _PY_STATE_BYTES)
            words = probe.getstate()[1]  # 624 state words, then the index
            ok = (
                raw
                == words[-1].to_bytes(4, sys.byteorder, signed=True)
                + np.asarray(words[:-1], dtype=np.uint32).tobytes()
            )
        _py_layout_ok = ok
    return _py_layout_ok


def _py_save() -> Any:
    if _py_layout():
        raw = ctypes.string_at(id(_py_inst) + _PY_OFFSET, _PY_STATE_BYTES)
        return (raw, _py_inst.gauss_next)
    return random.getstate()


def _py_restore(saved: Any) -> None:
    if isinstance(saved[0], bytes):
        ctypes.memmove(id(_py_inst) + _PY_OFFSET, saved[0], _PY_STATE_BYTES)
        _py_inst.gauss_next = saved[1]
    else:
        random.setstate(saved)


# --- seeding -----------------------------------------------------------------------------------

_torch_seed = torch.default_generator.manual_seed
_np_seed = np.random.seed
_py_cseed = _random.Random.seed  # random.seed's C part, without the Python wrapper's ~1.5 µs


def _py_seed(value: int) -> None:
    """``random.seed(value)`` for an int: the C seeding, then what the wrapper also resets."""
    _py_cseed(_py_inst, value)
    _py_inst.gauss_next = None  # gauss() must not carry a cached value over a reseed


SEEDERS: dict[str, Callable[[int], Any]] = {
    "torch": _torch_seed,
    "numpy": _np_seed,
    "random": _py_seed,
}


def seed_globals(row: Sequence[int], names: tuple[str, ...] = GENERATORS) -> None:
    """Seed the global generators in ``names`` from ``row`` = (torch, numpy, random) seeds,
    Python ints (numpy's below ``2**32``). The one function every path seeds global RNG with."""
    if names == GENERATORS:
        _torch_seed(row[0])
        _np_seed(row[1])
        _py_cseed(_py_inst, row[2])
        _py_inst.gauss_next = None
        return
    for name, value in zip(GENERATORS, row, strict=True):
        if name in names:
            SEEDERS[name](value)


def seeders(names: tuple[str, ...]) -> list[tuple[int, Callable[[int], Any]]]:
    """(column of a seed row, seeding function) for each generator in ``names``:
    :func:`seed_globals`'s calls, for the fetch loop to make per sample without a call."""
    return [(GENERATORS.index(name), SEEDERS[name]) for name in names]


def inline_seeders() -> tuple[Callable[[int], Any], Callable[[int], Any], Any, Any]:
    """:func:`seed_globals`'s body for the fetch loop to inline (a call per sample costs ~2%
    of its time): ``torch_seed(a); numpy_seed(b); random_cseed(inst, c); inst.gauss_next = None``
    is ``seed_globals((a, b, c))``."""
    return _torch_seed, _np_seed, _py_cseed, _py_inst


# --- all three ---------------------------------------------------------------------------------

_torch_gen = torch.default_generator


def save(names: tuple[str, ...]) -> tuple[Any, Any, Any]:
    """The state of the generators in ``names``, for :func:`restore`; the generators are left
    in an unspecified state (callers reseed them next)."""
    return (
        _torch_gen.get_state() if "torch" in names else None,
        _np_save() if "numpy" in names else None,
        _py_save() if "random" in names else None,
    )


def restore(saved: tuple[Any, Any, Any]) -> None:
    if saved[0] is not None:
        _torch_gen.set_state(saved[0])
    if saved[1] is not None:
        _np_restore(saved[1])
    if saved[2] is not None:
        _py_restore(saved[2])


def fingerprint(names: tuple[str, ...]) -> tuple[Any, Any, Any]:
    """The state of the generators in ``names`` (None for the others), to compare: a draw
    changes it. Reads only, so other threads may draw meanwhile (thread workers watch the
    generators with it); a few µs, torch's 5 KB state the most of it."""
    torch_state = _torch_gen.get_state().numpy().tobytes() if "torch" in names else None
    np_state: Any = None
    if "numpy" in names:
        address = _np_address()
        if address is not None:
            np_state = ctypes.string_at(address, _NP_STATE_BYTES)
        else:
            kind, key, *rest = np.random.get_state(legacy=True)
            np_state = (kind, np.asarray(key).tobytes(), *rest)
    py_state: Any = None
    if "random" in names:
        if _py_layout():
            py_state = ctypes.string_at(id(_py_inst) + _PY_OFFSET, _PY_STATE_BYTES)
        else:
            py_state = random.getstate()
    return torch_state, np_state, py_state


def capture() -> tuple[Any, Any, Any]:
    """Snapshot every generator of :data:`GENERATORS` (the caller's, around a fetch in the main
    process); an opaque value for :func:`restore`. A few µs: the states are copied as bytes."""
    saved = save(GENERATORS)
    restore(saved)  # saving may leave a generator moved; capturing must not
    return saved
