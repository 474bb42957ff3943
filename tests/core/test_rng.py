"""seekdata.rng: counter tuples -> independent, reproducible streams."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

import seekdata
from seekdata import rng
from seekdata._core import rngkeys as _rngkeys
from tests.helpers.paths import GOLDEN, ROOT

GOLDEN = json.loads((GOLDEN / "rng.json").read_text())


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


# --- the randomness table: one source (rng.STREAMS), the docs and the code agree ----------------


def test_the_randomness_table_in_the_docs_and_the_docstring_is_rng_streams() -> None:
    doc = (ROOT / "docs" / "randomness.md").read_text()
    table = "| decision | counters | code |\n| --- | --- | --- |\n" + "\n".join(
        f"| {s.decision} | {s.counters} | {s.code} |" for s in rng.STREAMS
    )
    assert table + "\n\n" in doc
    for s in rng.STREAMS:
        assert f"    {s.decision}: {s.counters}  [{s.code}]\n" in (rng.__doc__ or "")


def test_each_stream_is_derived_as_the_table_says() -> None:
    seed, epoch, index, step, digest_of = 7, 3, 41, 5, [41, 2, 9]
    # epoch order: Feistel rounds keyed by (seed, ORDER, epoch), applied to p
    keys = np.array(_rngkeys.key_words(seed, (rng.ORDER, epoch), 8), dtype=np.uint64)
    p = np.arange(100, dtype=np.uint64)
    want = seekdata.order.feistel_permute(p, 100, keys).astype(np.int64)
    assert np.array_equal(seekdata.order.Feistel(100, seed).indices(epoch, p), want)
    assert [seekdata.order.feistel_index(100, seed, epoch, int(x)) for x in p] == want.tolist()
    # a sample's own stream: Philox, key (seed, SAMPLE, epoch), counter (0, 0, index, 0)
    key = np.array(_rngkeys.key_words(seed, (rng.SAMPLE, epoch), 2), dtype=np.uint64)
    bitgen = np.random.Philox(key=key, counter=np.array([0, 0, index, 0], dtype=np.uint64))
    assert np.array_equal(
        seekdata.sample_generator(seed, epoch, index).random(4),
        np.random.Generator(bitgen).random(4),
    )
    # global RNG while a sample is fetched: key (seed, SAMPLE, epoch), mix_keyed of the index
    k = _rngkeys.key_words(seed, (rng.SAMPLE, epoch), 4)
    h = int(rng.mix_keyed(k[:2], np.array([index], dtype=np.uint64))[0])
    row = [h & 0xFFFFFFFF, h >> 32, h ^ k[2]]
    assert rng.global_seeds(seed, epoch, np.array([index])).tolist()[0] == row
    assert _rngkeys.sample_seeds(seed, epoch, index) == row
    # a batch transform: (seed, BATCH, epoch, step, crc32 of the indices)
    digest = zlib.crc32(np.asarray(digest_of, dtype=np.int64).tobytes())
    assert np.array_equal(
        rng.batch_generator(seed, epoch, step, digest_of).random(4),
        seekdata.numpy_generator(seed, rng.BATCH, epoch, step, digest).random(4),
    )
    # global RNG while a batch is collated: key (seed, BATCH, epoch), mix_keyed of (step, digest)
    k = _rngkeys.key_words(seed, (rng.BATCH, epoch), 4)
    h = int(rng.mix_keyed(k[:2], np.array([step << 32 | digest], dtype=np.uint64))[0])
    assert rng.batch_seeds(seed, epoch, step, digest) == [h & 0xFFFFFFFF, h >> 32, h ^ k[2]]
    # global RNG while a batch is read: key (seed, READ, epoch), mix_keyed of (step, digest)
    k = _rngkeys.key_words(seed, (rng.READ, epoch), 4)
    h = int(rng.mix_keyed(k[:2], np.array([step << 32 | digest], dtype=np.uint64))[0])
    assert rng.read_seeds(seed, epoch, step, digest) == [h & 0xFFFFFFFF, h >> 32, h ^ k[2]]
    # a batched read's stream: Philox, key (seed, READ, epoch), counter (0, step, digest, 0)
    key = np.array(k[:2], dtype=np.uint64)
    bitgen = np.random.Philox(key=key, counter=np.array([0, step, digest, 0], dtype=np.uint64))
    assert np.array_equal(
        rng.read_generator(seed, epoch, step, digest_of).random(4),
        np.random.Generator(bitgen).random(4),
    )
    # model-side global RNG: (seed, step, rank), key words 2 to 5 (torch, cuda, numpy, random)
    words = _rngkeys.key_words(seed, (step, 1), 6)
    seekdata.set_step_rng(seed, step, rank=1)
    assert torch.initial_seed() == words[2]
    drawn = np.random.rand(), random.random()
    np.random.seed(words[4] >> 32)
    random.seed(words[5])
    assert drawn == (np.random.rand(), random.random())
    # model-side explicit: key words 0 and 1 of the tuple
    g = np.random.Generator(np.random.Philox(key=np.array(words[:2], dtype=np.uint64)))
    assert np.array_equal(seekdata.numpy_generator(seed, step, 1).random(4), g.random(4))


def test_global_rng_is_seeded_in_one_place_and_keys_are_hashed_in_one_place() -> None:
    """Every path seeds global RNG through rng.seed_globals (seekdata/_core/globalrng.py) and
    derives keys with SeedSequence in seekdata/_core/rngkeys.py only; the mixing constants live
    there too (and in order.feistel_index, the scalar twin of the Feistel round, inlined for speed;
    its crc32 is a fingerprint of shard sizes, not a key)."""
    src = ROOT / "src" / "seekdata"
    seeding = ("default_generator.manual_seed(", "np.random.seed(", "random.seed(")
    hashing = ("SeedSequence(", "0xBF58476D1CE4E5B9", "crc32(")
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(src).as_posix()
        # bench: a user's reseeding baseline
        if name != "_core/globalrng.py" and "bench/" not in name:
            assert not [s for s in seeding if s in text], name
        # sources/remote/cache.py: its crc32 is a block's checksum, never a key
        allowed = ("crc32(",) if name == "sources/remote/cache.py" else ()
        if name not in ("_core/rngkeys.py", "_core/orders.py"):
            assert not [h for h in hashing if h in text and h not in allowed], name


def test_seed_globals_seeds_the_named_generators_only() -> None:
    rng.seed_globals((1, 2, 3))
    torch_state, py_state = torch.get_rng_state(), random.getstate()
    rng.seed_globals((4, 5, 6), ("numpy",))
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == py_state
    got = np.random.rand()
    np.random.seed(5)
    assert got == np.random.rand()
    random.gauss(0, 1)  # caches a second normal, which a reseed must drop
    rng.seed_globals((4, 5, 6))
    assert torch.initial_seed() == 4
    drawn = random.gauss(0, 1)
    random.seed(6)
    assert drawn == random.gauss(0, 1)
