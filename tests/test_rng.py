"""seekdata.rng: counter tuples -> independent, reproducible streams."""

from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

import seekdata
from seekdata import rng

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "rng.json").read_text())


@pytest.mark.parametrize("key", [k for k in GOLDEN if not k.startswith("sample")])
def test_golden_streams(key: str) -> None:
    case = tuple(int(c) for c in key.split(","))
    assert seekdata.numpy_generator(*case).integers(0, 2**32, 4).tolist() == GOLDEN[key]["numpy"]
    g = seekdata.torch_generator(*case)
    assert torch.randint(0, 2**31, (4,), generator=g).tolist() == GOLDEN[key]["torch"]


def test_golden_sample_stream() -> None:
    got = seekdata.sample_generator(3, 1, 5).integers(0, 2**32, 4).tolist()
    assert got == GOLDEN["sample(3,1,5)"]


def test_equal_tuples_equal_streams_distinct_tuples_differ() -> None:
    a = seekdata.numpy_generator(7, 1, 2).random(8)
    assert np.array_equal(a, seekdata.numpy_generator(7, 1, 2).random(8))
    for other in [(7, 2, 1), (7, 1, 3), (8, 1, 2), (7, 1), (7, 1, 2, 0)]:
        assert not np.array_equal(a, seekdata.numpy_generator(*other).random(8)), other


def test_no_seed_arithmetic_collisions() -> None:
    # (seed 0, epoch 1) must not equal (seed 1, epoch 0), unlike torch's seed + epoch
    a = seekdata.numpy_generator(0, 1).random(4)
    b = seekdata.numpy_generator(1, 0).random(4)
    assert not np.array_equal(a, b)


def test_same_stream_in_a_fresh_process() -> None:
    code = (
        "import seekdata;"
        "print(seekdata.numpy_generator(5, 6, 7).integers(0, 1000, 6).tolist());"
        "print(seekdata.sample_generator(5, 6, 7).integers(0, 1000, 6).tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == str(seekdata.numpy_generator(5, 6, 7).integers(0, 1000, 6).tolist())
    assert lines[1] == str(seekdata.sample_generator(5, 6, 7).integers(0, 1000, 6).tolist())


def test_torch_generator_device_and_equality() -> None:
    a = torch.rand(5, generator=seekdata.torch_generator(1, 2, device="cpu"))
    b = torch.rand(5, generator=seekdata.torch_generator(1, 2))
    assert torch.equal(a, b)
    assert not torch.equal(a, torch.rand(5, generator=seekdata.torch_generator(1, 3)))


@pytest.mark.parametrize(
    "args, error",
    [
        ((-1,), ValueError),
        ((1.5,), TypeError),
        (("0",), TypeError),
        ((True,), TypeError),
        ((0, -3), ValueError),
        ((0, None), TypeError),
    ],
)
def test_bad_counters(args: tuple, error: type) -> None:
    with pytest.raises(error, match="must be a non-negative int"):
        seekdata.numpy_generator(*args)
    with pytest.raises(error, match="must be a non-negative int"):
        seekdata.torch_generator(*args)


def test_numpy_integers_are_accepted() -> None:
    a = seekdata.numpy_generator(np.int64(3), np.uint32(4)).random()
    assert a == seekdata.numpy_generator(3, 4).random()


def test_sample_rng_outside_a_fetch_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="outside one"):
        seekdata.sample_rng()


def test_sample_scope_matches_sample_generator_and_continues_one_stream() -> None:
    with rng.sample_scope(4, 2, 99) as g:
        first = g.random(3)
        again = seekdata.sample_rng().random(2)  # same fetch: the stream continues
    ref = seekdata.sample_generator(4, 2, 99)
    assert np.array_equal(first, ref.random(3))
    assert np.array_equal(again, ref.random(2))


def test_sample_scope_reseeds_globals_and_restores_them() -> None:
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    before = (torch.rand(1), np.random.rand(), random.random())
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    draws = []
    for _ in range(2):
        with rng.sample_scope(0, 0, 17):
            draws.append((torch.rand(3), np.random.rand(3), random.random()))
    after = (torch.rand(1), np.random.rand(), random.random())
    assert torch.equal(draws[0][0], draws[1][0])
    assert np.array_equal(draws[0][1], draws[1][1]) and draws[0][2] == draws[1][2]
    assert torch.equal(before[0], after[0]) and before[1:] == after[1:]


def test_sample_streams_differ_by_index_and_epoch() -> None:
    base = seekdata.sample_generator(0, 0, 0).random(4)
    for other in [(0, 0, 1), (0, 1, 0), (1, 0, 0)]:
        assert not np.array_equal(base, seekdata.sample_generator(*other).random(4))


def test_global_seeds_are_a_function_of_the_key_only() -> None:
    a = rng.global_seeds(1, 2, np.array([5, 6, 7]))
    b = rng.global_seeds(1, 2, np.array([7, 5]))
    assert np.array_equal(a[[2, 0]], b)
    assert len({tuple(r) for r in rng.global_seeds(1, 2, np.arange(1000)).tolist()}) == 1000
    assert int(a[:, 1].max()) < 2**32  # numpy's legacy seed is 32-bit
