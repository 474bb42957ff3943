"""The loader's arguments are one list (issue 36, item 2): the signature, the config and the
loader's attributes follow from ``seekdata._loader.config.ARGUMENTS``; torch's options are a
typed value; ``num_workers`` keeps the integer rule at every entry point; the seed is one object
that the loader, its config and its engine share."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
from typing import Any

import numpy as np
import pytest
import torch

import seekdata
from seekdata._core.checks import ArgumentError
from seekdata._loader import config as _config
from seekdata._loader.engines import mapstyle

Loader = seekdata.StatefulDataLoader
DATA = list(range(12))


# --- one list -----------------------------------------------------------------------------------


def test_the_signature_is_the_list_of_arguments_in_order() -> None:
    """Adding an argument is one entry in ARGUMENTS and one parameter: this test says where
    they differ. The signature stays explicit (what users and IDEs read)."""
    params = list(inspect.signature(Loader.__init__).parameters.values())
    assert [p.name for p in params[:2]] == ["self", "dataset"]
    rest = params[2:]
    assert [p.name for p in rest] == [a.name for a in _config.ARGUMENTS]
    for p, argument in zip(rest, _config.ARGUMENTS, strict=True):
        assert p.default is not inspect.Parameter.empty, p.name  # every one has its default
        assert p.default == argument.default, p.name
        keyword = p.kind is inspect.Parameter.KEYWORD_ONLY
        assert keyword == argument.keyword_only, p.name
        assert argument.doc and "\n" not in argument.doc, p.name  # one line each


def test_torchs_defaults_are_torchs() -> None:
    """The arguments torch's DataLoader has keep torch's defaults (public API unchanged)."""
    theirs = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    shared = [a for a in _config.ARGUMENTS if a.name in theirs]
    assert len(shared) >= 16
    for argument in shared:
        assert theirs[argument.name].default == argument.default, argument.name


def test_the_config_holds_every_argument_and_the_loader_shows_torchs_attributes() -> None:
    loader = Loader(DATA, batch_size=3, shuffle=True, seed=4, num_workers=np.int64(0))
    config = loader._engine.config
    assert list(config.arguments) == [a.name for a in _config.ARGUMENTS]
    for argument in _config.ARGUMENTS:
        value = getattr(config, argument.name)
        if argument.name == "collate_fn":  # None: the loader shows torch's default, as torch
            value = torch.utils.data.default_collate
        if argument.attribute:
            assert getattr(loader, argument.name) == value, argument.name
    assert config.batch_size == loader.batch_size == 3 and config.seed == loader.seed == 4
    assert type(loader.num_workers) is int
    # the attributes seekdata adds are typed on the class, and each is an argument
    names = {a.name for a in _config.ARGUMENTS}
    assert set(Loader.__annotations__) <= names
    with pytest.raises(AttributeError, match="no argument or field 'nothing'"):
        config.nothing  # noqa: B018


def test_torchs_options_are_a_typed_frozen_value() -> None:
    loader = Loader(DATA, batch_size=2, num_workers=1, in_order=np.True_)
    options = loader._engine.config.torch
    assert isinstance(options, _config.TorchOptions)
    names = [f.name for f in dataclasses.fields(_config.TorchOptions)]
    assert len(names) == 8 and set(names) <= {a.name for a in _config.ARGUMENTS}
    assert options.num_workers == 1 and options.prefetch_factor == 2  # torch's default with workers
    assert options.in_order is True
    assert options.kwargs() == {name: getattr(options, name) for name in names}
    for name in names:  # what the engine's torch DataLoader runs with
        assert getattr(loader._engine.loader, name) == getattr(options, name), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.num_workers = 2  # type: ignore[misc]


# --- the integer rule, at every entry point -----------------------------------------------------


@pytest.mark.parametrize("bad", [True, np.bool_(True), 1.0, "2"])
def test_num_workers_keeps_the_integer_rule_at_construction(bad: Any) -> None:
    with pytest.raises(ArgumentError, match=r"num_workers must be an int; got \w+ .*; pass"):
        Loader(DATA, num_workers=bad)
    with pytest.raises(ArgumentError, match="num_workers must be an int"):
        Loader(_Stream(), num_workers=bad)  # the iterable path too


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_num_workers_keeps_the_integer_rule_on_assignment(kind: str) -> None:
    loader = Loader(DATA if kind == "map" else _Stream(), batch_size=2)
    loader.num_workers = np.int64(2)
    assert loader.num_workers == 2 and type(loader.num_workers) is int
    engine = loader._engine
    forwarded = engine.loader if kind == "map" else engine.engine
    assert forwarded.num_workers == 2 and type(forwarded.num_workers) is int
    for bad in (True, 2.0):
        with pytest.raises(ArgumentError, match=r"num_workers must be an int >= 0; got"):
            loader.num_workers = bad
    with pytest.raises(ValueError, match=r"num_workers must be an int >= 0; got -1; pass"):
        loader.num_workers = -1
    assert loader.num_workers == 2 and forwarded.num_workers == 2  # nothing forwarded


def test_prefetch_factor_and_device_prefetch_keep_the_integer_rule() -> None:
    loader = Loader(DATA, num_workers=1, prefetch_factor=np.int32(3))
    assert loader.prefetch_factor == 3 and type(loader.prefetch_factor) is int
    with pytest.raises(ArgumentError, match="prefetch_factor must be an int"):
        Loader(DATA, num_workers=1, prefetch_factor=True)
    with pytest.raises(ArgumentError, match="prefetch_factor must be an int >= 0"):
        loader.prefetch_factor = 2.5
    ok = Loader(DATA, device="cpu", device_prefetch=np.int64(2))
    assert ok._engine.lookahead is not None and ok._engine.lookahead.depth == 2
    with pytest.raises(ArgumentError, match="device_prefetch must be an int >= 1"):
        Loader(DATA, device="cpu", device_prefetch=np.bool_(True))


INTEGER_ARGUMENTS = {
    "batch_size": {},
    "num_workers": {},
    "prefetch_factor": {"num_workers": 1},
    "snapshot_every_n_steps": {},
    "device_prefetch": {"device": "cpu"},
    "seed": {},
}


@pytest.mark.parametrize("name", sorted(INTEGER_ARGUMENTS))
def test_every_integer_argument_takes_numpy_integers_and_refuses_bools(name: str) -> None:
    """The one rule at every integer entry point: construction, assignment, the methods."""
    extra = INTEGER_ARGUMENTS[name]
    loader = Loader(DATA, **extra, **{name: np.int64(2)})
    value = loader.seed if name == "seed" else getattr(loader._engine.config, name)
    assert value == 2 and type(value) is int
    with pytest.raises(ArgumentError, match=f"{name} must be"):
        Loader(DATA, **extra, **{name: True})


@pytest.mark.parametrize("name", ["num_workers", "prefetch_factor", "device_prefetch"])
def test_every_integer_attribute_keeps_the_rule_on_assignment(name: str) -> None:
    loader = Loader(DATA, num_workers=1, device="cpu")
    setattr(loader, name, np.int64(2))
    assert getattr(loader, name) == 2
    with pytest.raises(ArgumentError, match=f"{name} must be an int"):
        setattr(loader, name, True)
    assert getattr(loader, name) == 2


@pytest.mark.parametrize(
    ("method", "args"),
    [("skip", (1,)), ("skip_to", (1,)), ("skip_steps", (1, 2)), ("assign_rank", (1, 0))],
)
def test_every_integer_method_argument_keeps_the_rule(method: str, args: tuple[int, ...]) -> None:
    loader = Loader(DATA, batch_size=2, shuffle=True, seed=0)
    getattr(loader, method)(*(np.int64(a) for a in args))
    with pytest.raises(ArgumentError, match="must be"):
        getattr(loader, method)(*(True for _ in args))


def test_the_loader_files_check_integers_with_the_one_rule() -> None:
    """No file of the loader rolls its own integer check (isinstance(x, int)): checks.py's."""
    root = pathlib.Path(seekdata.__file__).parent
    files = [root / "loader.py", *sorted((root / "_loader").rglob("*.py"))]
    own = [f.name for f in files if "isinstance(" in f.read_text() and ", int)" in f.read_text()]
    assert own == []


# --- one seed, shared ---------------------------------------------------------------------------


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self) -> Any:
        return iter(range(6))


@pytest.mark.parametrize("kind", ["seekable", "replay", "iterable"])
def test_a_checkpoints_seed_reaches_every_holder(kind: str) -> None:
    def build(seed: int | None) -> Any:
        if kind == "iterable":
            return Loader(_Stream(), batch_size=2, seed=seed)
        if kind == "replay":
            return Loader(DATA, batch_size=2, sampler=range(12), seed=seed)
        return Loader(DATA, batch_size=2, shuffle=True, seed=seed)

    saved = build(12345)
    next(iter(saved))
    loader = build(None)
    assert loader.seed != 12345
    loader.load_state_dict(saved.state_dict())
    engine = loader._engine
    assert loader.seed == engine.config.seed == engine.seed == engine.keys.seed == 12345
    assert engine.keys is engine.config.keys  # one object, shared by reference
    if kind == "iterable":
        assert engine.seeder.seed == 12345
    else:
        assert engine.keyed.seed == engine.thread_keyed.seed == 12345
        assert engine.loader.collate_fn.seed == engine.thread_collate.seed == 12345
    if kind == "seekable":
        assert engine.sampler.seed == 12345
    assert loader.state_dict()["sample_seed"] == saved.state_dict()["sample_seed"]


def test_the_seed_is_not_assigned_after_construction() -> None:
    loader = Loader(DATA, seed=1)
    with pytest.raises(ValueError, match="seed attribute should not be set"):
        loader.seed = 2
    assert loader.seed == 1


# --- rank: one name -----------------------------------------------------------------------------


def test_the_engines_change_rank_by_the_loaders_name_and_shard_is_its_alias() -> None:
    assert hasattr(mapstyle.MapEngine, "assign_rank")
    assert not hasattr(mapstyle.MapEngine, "become_rank")
    a, b = (Loader(DATA, batch_size=2, shuffle=True, seed=3) for _ in range(2))
    a.assign_rank(2, 1)
    b.shard(2, 1)
    assert a.sampler.rank == b.sampler.rank == 1
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    assert "alias of :meth:`assign_rank`" in (Loader.shard.__doc__ or "")
