"""set_step_rng (model-side randomness as a function of the step) and capture/restore_rng."""

from __future__ import annotations

import importlib.util
import io
import json
import random

import numpy as np
import pytest
import torch

from seekdata.rng import torch_generator
from seekdata.training import RNG_FORMAT, capture_rng, restore_rng, set_step_rng


def dropout_mask(seed: int, step: int, rank: int) -> torch.Tensor:
    set_step_rng(seed, step, rank=rank)
    return torch.nn.functional.dropout(torch.ones(256), p=0.5, training=True)


def draws() -> tuple[list[float], list[float], list[float]]:
    """A few draws from each global RNG, including the Gaussian caches of numpy and random."""
    return (
        torch.rand(4).tolist() + torch.randn(3).tolist(),
        np.random.rand(4).tolist() + np.random.randn(3).tolist(),
        [random.random() for _ in range(4)] + [random.gauss(0, 1) for _ in range(3)],
    )


# --- set_step_rng ---------------------------------------------------------------------------


def test_dropout_is_a_function_of_seed_step_rank() -> None:
    first = dropout_mask(0, 5, 0)
    torch.rand(100)  # anything drawn in between must not matter
    assert torch.equal(first, dropout_mask(0, 5, 0))
    assert not torch.equal(first, dropout_mask(0, 6, 0))
    assert not torch.equal(first, dropout_mask(0, 5, 1))
    assert not torch.equal(first, dropout_mask(1, 5, 0))


def test_numpy_and_random_are_seeded_too() -> None:
    set_step_rng(3, 9, rank=1)
    a = draws()
    np.random.rand(10), random.random()
    set_step_rng(3, 9, rank=1)
    assert draws() == a
    set_step_rng(3, 10, rank=1)
    b = draws()
    assert all(x != y for x, y in zip(a, b, strict=True))


def test_golden_values() -> None:
    # Pinned: a change here changes every resumed run's dropout; make it a reviewed break.
    set_step_rng(7, 11, rank=2)
    assert torch.randint(0, 2**31, (3,)).tolist() == [303775089, 1976585074, 1865702471]
    assert np.random.randint(0, 2**31, 3).tolist() == [536747891, 2090063652, 1939670570]
    assert [random.getrandbits(31) for _ in range(3)] == [1095440810, 905494756, 369653960]


def test_global_stream_is_not_the_explicit_generator() -> None:
    # torch_generator(seed, step, rank) is the documented explicit form; the global stream
    # seeded for the same tuple must be a different one, or noise would equal dropout.
    set_step_rng(0, 3, rank=1)
    global_draw = torch.rand(8)
    explicit = torch.rand(8, generator=torch_generator(0, 3, 1))
    assert not torch.equal(global_draw, explicit)


def test_torch_and_numpy_legacy_start_in_different_states() -> None:
    # Both are MT19937 seeded with 32 bits; equal seeds would give equal raw streams.
    set_step_rng(0, 0, rank=0)
    t = torch.randint(0, 2**32, (4,), dtype=torch.int64).tolist()
    n = np.random.randint(0, 2**32, 4, dtype=np.uint64).tolist()
    assert t != n


def test_rank_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    set_step_rng(0, 4)
    from_env = torch.rand(4)
    set_step_rng(0, 4, rank=1)
    assert torch.equal(from_env, torch.rand(4))


def test_seeds_cuda_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    seeded: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded.append)
    set_step_rng(0, 1, rank=0)
    set_step_rng(0, 2, rank=0)
    assert len(seeded) == 2 and seeded[0] != seeded[1]
    assert all(isinstance(s, int) and 0 <= s < 2**64 for s in seeded)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seed": -1, "step": 0}, ValueError, "seed must be a non-negative int; got -1"),
        ({"seed": 0, "step": -2}, ValueError, "step must be a non-negative int; got -2"),
        ({"seed": 0, "step": "3"}, TypeError, "step must be a non-negative int; got str"),
        ({"seed": 0.5, "step": 3}, TypeError, "seed must be a non-negative int; got float"),
        ({"seed": 0, "step": 1, "rank": -1}, ValueError, "rank must be a non-negative int"),
        ({"seed": 0, "step": 1, "rank": True}, TypeError, "rank must be a non-negative int"),
    ],
)
def test_set_step_rng_rejects_bad_input(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        set_step_rng(**kwargs)


def test_numpy_integers_are_accepted() -> None:
    set_step_rng(np.int64(2), np.uint32(8), rank=np.int8(1))
    a = torch.rand(3)
    set_step_rng(2, 8, rank=1)
    assert torch.equal(a, torch.rand(3))


# --- capture_rng / restore_rng --------------------------------------------------------------


def test_capture_restore_round_trip_through_weights_only_load() -> None:
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.randn()  # leave numpy's and random's Gaussian caches full
    random.gauss(0, 1)
    state = capture_rng()
    expected = draws()
    buffer = io.BytesIO()
    torch.save({"rng/rank0": state}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["rng/rank0"]
    draws()
    restore_rng(loaded)
    assert draws() == expected


def test_state_shape() -> None:
    state = capture_rng()
    assert state["format"] == RNG_FORMAT and state["rank"] == 0
    assert state["torch"].dtype == torch.uint8 and state["cuda"] == []
    json.dumps({k: v for k, v in state.items() if k != "torch"})  # everything else is JSON


def test_restore_from_a_list_uses_this_ranks_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    per_rank = []
    for r in range(2):
        monkeypatch.setenv("RANK", str(r))
        set_step_rng(0, 0, rank=r)
        per_rank.append(capture_rng())
    expected = torch.rand(4)  # rank 1's stream
    torch.rand(7)
    restore_rng(per_rank)  # RANK is 1
    assert torch.equal(torch.rand(4), expected)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match="captured on rank 1 but this is rank 0"):
        restore_rng(per_rank[1])
    restore_rng(per_rank[1], check_rank=False)
    assert torch.equal(torch.rand(4), expected)


def test_list_too_short_for_this_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    state = capture_rng()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError, match=r"one state per rank.*got 1 states on rank 3"):
        restore_rng([state])


def corrupt(change: dict) -> dict:
    state = capture_rng()
    for key, value in change.items():
        if "." in key:
            outer, inner = key.split(".")
            state[outer] = {**state[outer], inner: value}
        else:
            state[key] = value
    return state


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        (lambda: "nope", TypeError, "must be the dict returned by seekdata.capture_rng"),
        (lambda: {"torch": torch.get_rng_state()}, ValueError, r"\['cuda', 'format'"),
        (lambda: corrupt({"format": "v0"}), ValueError, "format must be 'seekdata.rng/1'"),
        (lambda: corrupt({"torch": [1, 2]}), TypeError, r"state\['torch'\] must be a 1-D uint8"),
        (
            lambda: corrupt({"torch": torch.zeros(5056, dtype=torch.int32)}),
            TypeError,
            "got tensor of dtype torch.int32",
        ),
        (lambda: corrupt({"torch": torch.zeros(3, dtype=torch.uint8)}), ValueError, "refused"),
        (lambda: corrupt({"cuda": "x"}), TypeError, "one per CUDA device"),
        (
            lambda: corrupt({"cuda": [torch.zeros(16, dtype=torch.uint8)]}),
            ValueError,
            "holds 1 and this process has 0",
        ),
        (lambda: corrupt({"numpy": 5}), ValueError, r"state\['numpy'\] must be a dict"),
        (lambda: corrupt({"numpy.keys": [1] * 3}), ValueError, "list of 624 ints"),
        (lambda: corrupt({"numpy.keys": [-1] * 624}), ValueError, r"in \[0, 2\*\*32\)"),
        (lambda: corrupt({"numpy.pos": 700}), ValueError, r"pos in \[0, 624\]"),
        (lambda: corrupt({"numpy.cached_gaussian": "x"}), TypeError, "must be a float"),
        (lambda: corrupt({"python.version": 2}), ValueError, "version 3"),
        (lambda: corrupt({"python.internal": [0] * 624}), ValueError, "list of 625 ints"),
    ],
)
def test_restore_rejects_bad_states_and_changes_nothing(state, error, match) -> None:
    bad = state()
    set_step_rng(0, 0, rank=0)
    expected = draws()
    set_step_rng(0, 0, rank=0)
    with pytest.raises(error, match=match):
        restore_rng(bad)
    assert draws() == expected


def test_restores_cuda_states_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_states = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]
    restored: list[list[torch.Tensor]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: cuda_states)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    state = capture_rng()
    assert state["cuda"] == cuda_states
    restore_rng(state)
    assert len(restored) == 1 and all(
        torch.equal(a, b) for a, b in zip(restored[0], cuda_states, strict=True)
    )


# --- with seekdata's loader, RNG restore order does not matter --------------------------------

LOADER_MISSING = importlib.util.find_spec("seekdata.loader") is None


class GlobalRngDataset(torch.utils.data.Dataset):
    """Samples drawn from global torch RNG, as unmodified augmentation code does."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.rand(2)


def first_batch_and_model_draw(make_loader, restore_first: bool, state) -> tuple:
    loader = make_loader()
    if restore_first:
        restore_rng(state)
        it = iter(loader)
    else:
        it = iter(loader)
        restore_rng(state)
    batch = next(it)
    return batch, torch.rand(3)  # model-side draw after fetching the resumed batch


def restore_order_matters(make_loader) -> bool:
    set_step_rng(0, 0, rank=0)
    state = capture_rng()
    a = first_batch_and_model_draw(make_loader, True, state)
    b = first_batch_and_model_draw(make_loader, False, state)
    return not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))


def test_torch_dataloader_makes_restore_order_matter() -> None:
    # The control: torch's iter() draws its base seed from global RNG.
    assert restore_order_matters(lambda: torch.utils.data.DataLoader(GlobalRngDataset(), 4))


@pytest.mark.skipif(LOADER_MISSING, reason="seekdata.loader does not exist yet")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_seekdata_loader_makes_restore_order_irrelevant(num_workers: int) -> None:
    from seekdata.loader import StatefulDataLoader

    def make_loader() -> StatefulDataLoader:
        return StatefulDataLoader(GlobalRngDataset(), 4, num_workers=num_workers, seed=0)

    assert not restore_order_matters(make_loader)
