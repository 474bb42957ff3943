"""The one argument rule (seekdata/_core/checks.py), at every public entry point that takes an
integer or a flag: numpy integers are ints, bools never are; numpy bools are flags, ints never
are; a wrong type is an ArgumentError (TypeError and ValueError), a wrong value a ValueError;
a checkpoint that does not fit is a StateMismatchError."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import seekdata
from seekdata._core.checks import ArgumentError
from seekdata.checkpoint import CheckpointManager
from seekdata.tokens import PackedDocuments, TokenWindows
from seekdata.transforms import RandomCrop

DATA = list(range(32))


def _tokens(tmp: pathlib.Path) -> str:
    path = tmp / "tokens.bin"
    ids = np.arange(2, 202, dtype=np.uint16)
    ids[::10] = 1  # an eos every 10 tokens
    ids.tofile(path)
    return str(path)


def _loader() -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(DATA, batch_size=4, shuffle=True, seed=0)


#: name -> a call of a public entry point with one integer argument ``v``
INTS: dict[str, Callable[[Any, pathlib.Path], Any]] = {
    "StatefulDataLoader(batch_size=)": lambda v, _: seekdata.StatefulDataLoader(DATA, batch_size=v),
    "StatefulDataLoader(seed=)": lambda v, _: seekdata.StatefulDataLoader(DATA, seed=v),
    "StatefulDataLoader(device_prefetch=)": lambda v, _: seekdata.StatefulDataLoader(
        DATA, device_prefetch=v
    ),
    "StatefulDataLoader.skip": lambda v, _: _loader().skip(v),
    "StatefulDataLoader.skip_to": lambda v, _: _loader().skip_to(v),
    "StatefulDataLoader.assign_rank(num_replicas=)": lambda v, _: _loader().assign_rank(v, 0),
    "StatefulDataLoader.shard(num_replicas=)": lambda v, _: _loader().shard(v, 0),
    "StatefulDataLoader.set_epoch": lambda v, _: _loader().set_epoch(v),
    "DistributedSampler(seed=)": lambda v, _: seekdata.DistributedSampler(DATA, 1, 0, seed=v),
    "DistributedSampler(num_replicas=)": lambda v, _: seekdata.DistributedSampler(DATA, v, 0),
    "DistributedSampler.set_epoch": lambda v, _: seekdata.DistributedSampler(DATA, 1, 0).set_epoch(
        v
    ),
    "Mixture(length=)": lambda v, _: seekdata.Mixture([range(5), range(7)], [1, 1], length=v),
    "Mixture(seed=)": lambda v, _: seekdata.Mixture([range(5), range(7)], [1, 1], seed=v),
    "Mixture.gone": lambda v, _: seekdata.Mixture.gone(v),
    "PackedDocuments(seq_len=)": lambda v, tmp: PackedDocuments(_tokens(tmp), v, eos_id=1),
    "TokenWindows(seq_len=)": lambda v, tmp: TokenWindows(_tokens(tmp), v),
    "set_step_rng(step=)": lambda v, _: seekdata.set_step_rng(0, v),
    "CheckpointManager(keep_last=)": lambda v, tmp: CheckpointManager(tmp, keep_last=v),
    "RandomCrop(size=)": lambda v, _: RandomCrop(v),
}

#: name -> a call of a public entry point with one flag ``v``
FLAGS: dict[str, Callable[[Any, pathlib.Path], Any]] = {
    "StatefulDataLoader(drop_last=)": lambda v, _: seekdata.StatefulDataLoader(
        DATA, batch_size=4, drop_last=v
    ),
    "StatefulDataLoader(step_rng=)": lambda v, _: seekdata.StatefulDataLoader(DATA, step_rng=v),
    "DistributedSampler(shuffle=)": lambda v, _: seekdata.DistributedSampler(DATA, 1, 0, shuffle=v),
    "Mixture(reseed_global_rng=)": lambda v, _: seekdata.Mixture(
        [range(5), range(7)], [1, 1], reseed_global_rng=v
    ),
    "PackedDocuments(rebuild_index=)": lambda v, tmp: PackedDocuments(
        _tokens(tmp), 8, eos_id=1, rebuild_index=v
    ),
}


@pytest.mark.parametrize("name", sorted(INTS))
@pytest.mark.parametrize("kind", [np.int64, np.uint32, np.int16])
def test_every_integer_argument_takes_numpy_integers(
    name: str, kind: type, tmp_path: pathlib.Path
) -> None:
    INTS[name](kind(4), tmp_path)  # no error: a numpy integer is an int


@pytest.mark.parametrize("name", sorted(INTS))
@pytest.mark.parametrize("value", [True, np.bool_(True), 4.0, "4"])
def test_every_integer_argument_refuses_bools_and_non_ints_as_both_error_kinds(
    name: str, value: Any, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(ArgumentError) as raised:
        INTS[name](value, tmp_path)
    # torch's DataLoader raises ValueError for some of these: either except catches it
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)
    assert "must be" in str(raised.value) and "; got " in str(raised.value)


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_every_flag_takes_numpy_bools_and_refuses_ints(name: str, tmp_path: pathlib.Path) -> None:
    FLAGS[name](np.bool_(False), tmp_path)
    with pytest.raises(ArgumentError, match=r"must be a bool|should be a boolean"):
        FLAGS[name](1, tmp_path)


def test_a_mixture_change_refuses_another_checkpoint_as_a_state_mismatch() -> None:
    mix = seekdata.Mixture([range(5), range(7)], [1, 1], seed=0)
    state = seekdata.StatefulDataLoader(mix, batch_size=2, seed=0).state_dict()
    with pytest.raises(seekdata.StateMismatchError, match="another mixture"):
        seekdata.Mixture([range(5), range(7)], [1, 3], seed=0).changed(
            {**state, "position": 4}, [1, 2]
        )
    with pytest.raises(seekdata.StateMismatchError, match="positions per epoch"):
        mix.changed({**state, "n": 99}, [1, 2])
    with pytest.raises(seekdata.StateMismatchError, match="the state's 'epoch'"):
        mix.changed({**state, "epoch": -1}, [1, 2])
