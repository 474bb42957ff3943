"""Augmentation pipelines on explicit streams: determinism, stream independence, operations."""

from __future__ import annotations

import functools
import random
import subprocess
import sys
import threading
import zlib

import numpy as np
import pytest
import torch

from seekdata.rng import BATCH, numpy_generator, sample_generator, sample_rng, sample_scope
from seekdata.transforms import (
    ColorJitter,
    Compose,
    CutMix,
    GaussianNoise,
    MixUp,
    RandomApply,
    RandomChoice,
    RandomCrop,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation90,
    RandomVerticalFlip,
    TokenMask,
    TransformedDataset,
    _compose,
    batch_generator,
    from_global_rng,
)

# --- helpers -------------------------------------------------------------------------------


class Record:
    """A step that records the first draws of the stream it is given."""

    def __init__(self, log: dict[str, list[float]], name: str) -> None:
        self.log, self.name = log, name

    def __call__(self, sample, rng):
        self.log.setdefault(self.name, []).extend(rng.random(3).tolist())
        return sample


def recorded(steps, key=(0, 1, 7)) -> dict[str, list[float]]:
    log: dict[str, list[float]] = {}
    pipe = Compose({n: Record(log, n) for n in steps} if isinstance(steps, dict) else steps(log))
    pipe(None, sample_generator(*key))
    return log


def image(kind: str, layout: str, dtype: str, shape=(3, 20, 24)) -> np.ndarray | torch.Tensor:
    c, h, w = shape
    rng = np.random.default_rng(0)
    x = rng.random((c, h, w)) if dtype.startswith("float") else rng.integers(0, 256, (c, h, w))
    x = x.astype(dtype)
    if layout == "HWC":
        x = np.ascontiguousarray(x.transpose(1, 2, 0))
    return torch.from_numpy(x) if kind == "torch" else x


def as_numpy(x) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else x


IMAGE_PIPELINE = """
import hashlib, numpy as np, torch
from seekdata.rng import sample_generator
from seekdata.transforms import *
pipe = Compose([RandomResizedCrop(16), RandomHorizontalFlip(), RandomRotation90(),
                ColorJitter(0.4, 0.4), GaussianNoise(0.05), RandomErasing(0.5)])
x = torch.linspace(0, 1, 3 * 32 * 32).reshape(3, 32, 32)
digest = hashlib.sha256()
for index in range(12):
    digest.update(pipe(x, sample_generator(5, 2, index)).numpy().tobytes())
result = digest.hexdigest()
"""


# --- determinism ---------------------------------------------------------------------------


def test_same_key_same_bytes_in_another_process() -> None:
    here: dict = {}
    exec(IMAGE_PIPELINE, here)
    code = IMAGE_PIPELINE + "\nprint(result)\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == here["result"]


def pipeline() -> Compose:
    return Compose(
        [
            RandomResizedCrop(12),
            RandomHorizontalFlip(),
            RandomApply(Compose([ColorJitter(0.3, 0.3), GaussianNoise(0.1)]), p=0.7),
            RandomChoice([RandomErasing(1.0), RandomRotation90()]),
        ]
    )


def test_per_key_outputs_do_not_depend_on_order_thread_or_interleaving() -> None:
    x = torch.rand(3, 24, 24)
    pipe = pipeline()
    keys = [(0, e, i) for e in range(2) for i in range(10)]
    expected = {k: pipe(x, sample_generator(*k)) for k in keys}

    shuffled = list(keys)
    random.Random(3).shuffle(shuffled)
    other = Compose([RandomCrop(8), GaussianNoise(1.0)])
    for k in shuffled:  # other pipelines in between, as on a shared worker
        other(x, sample_generator(9, 9, 9))
        assert torch.equal(pipe(x, sample_generator(*k)), expected[k])

    results: dict = {}

    def worker(part) -> None:  # thread-local scratch generators
        for k in part:
            results[k] = pipe(x, sample_generator(*k))

    threads = [threading.Thread(target=worker, args=(shuffled[j::2],)) for j in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(results[k], expected[k]) for k in keys)


def test_loader_fetch_stream_equals_sample_generator() -> None:
    x = np.linspace(0, 1, 3 * 16 * 16, dtype=np.float32).reshape(3, 16, 16)
    pipe = pipeline()
    with sample_scope(1, 4, 33):
        inside = pipe(x, sample_rng())
    assert np.array_equal(inside, pipe(x, sample_generator(1, 4, 33)))


def test_different_epochs_and_indices_give_different_augmentations() -> None:
    x = torch.rand(3, 24, 24)
    pipe = Compose([RandomResizedCrop(12), GaussianNoise(0.1)])
    base = pipe(x, sample_generator(0, 0, 5))
    assert not torch.equal(base, pipe(x, sample_generator(0, 1, 5)))
    assert not torch.equal(base, pipe(x, sample_generator(0, 0, 6)))
    assert not torch.equal(base, pipe(x, sample_generator(1, 0, 5)))


# --- stream derivation ---------------------------------------------------------------------


def test_appending_or_inserting_after_keeps_earlier_steps() -> None:
    two = recorded(lambda log: [Record(log, "a"), Record(log, "b")])
    three = recorded(lambda log: [Record(log, "a"), Record(log, "b"), Record(log, "new")])
    middle = recorded(lambda log: [Record(log, "a"), Record(log, "new"), Record(log, "b")])
    assert three["a"] == two["a"] and three["b"] == two["b"]
    assert middle["a"] == two["a"]
    assert len({tuple(v) for v in three.values()}) == 3  # every step has its own stream


def test_named_steps_keep_their_streams_wherever_a_step_is_inserted() -> None:
    before = recorded({"crop": 0, "flip": 0})
    after = recorded({"new": 0, "crop": 0, "other": 0, "flip": 0})
    assert after["crop"] == before["crop"] and after["flip"] == before["flip"]
    assert after["new"] != before["crop"]


def test_changing_a_step_leaves_the_others_unchanged() -> None:
    x = torch.rand(3, 24, 24)
    noise_only = Compose([RandomHorizontalFlip(0.0), GaussianNoise(0.1)])
    flip_too = Compose([RandomHorizontalFlip(1.0), GaussianNoise(0.1)])
    a = noise_only(x, sample_generator(0, 0, 1)) - x
    b = flip_too(x, sample_generator(0, 0, 1)) - torch.flip(x, (2,))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)  # same noise, only the flip differs


def test_step_streams_are_pinned() -> None:
    """The derivation is a format: a change here changes every augmentation (review it)."""
    log = recorded(lambda log: [Record(log, "a"), Compose([Record(log, "inner")])])
    assert _compose.step_words(0, 0, 0, [1, 2]) == (17941374448711572841, 500437955558405396)
    assert log["a"] == [0.9123450710040671, 0.23119268207868193, 0.9611713948261209]
    assert log["inner"] == [0.19314459646030302, 0.16653397716455198, 0.6482386148779065]


def test_step_stream_is_philox_at_the_documented_counter() -> None:
    log = recorded(lambda log: [Record(log, "a"), Record(log, "b")], key=(3, 4, 5))
    parent = sample_generator(3, 4, 5).bit_generator.state["state"]
    for name, word in zip("ab", _compose.step_words(0, 0, 0, [1, 2]), strict=True):
        counter = np.array([0, 0, 5, word], dtype=np.uint64)
        expected = np.random.Generator(np.random.Philox(key=parent["key"], counter=counter))
        assert log[name] == expected.random(3).tolist()


def test_nested_compose_hashes_its_path() -> None:
    log = recorded(
        lambda log: [
            Compose([Record(log, "outer0.inner0"), Record(log, "outer0.inner1")]),
            Compose([Record(log, "outer1.inner0")]),
            Record(log, "outer2"),
        ]
    )
    flat = recorded(lambda log: [Record(log, "0"), Record(log, "1"), Record(log, "2")])
    streams = {tuple(v) for v in [*log.values(), *flat.values()]}
    assert len(streams) == 6  # no nested stream repeats a sibling's or a top-level one
    assert log["outer2"] == flat["2"]


def test_children_do_not_overlap_the_parent_or_each_other() -> None:
    rng = sample_generator(0, 0, 3)
    words: list[np.ndarray] = []

    def take(sample, r):
        words.append(r.bit_generator.random_raw(256))
        return sample

    Compose([take, take, Compose([take, take])])(None, rng)
    parent = sample_generator(0, 0, 3).bit_generator.random_raw(512)
    assert np.array_equal(rng.bit_generator.random_raw(8), parent[4:12])  # one block on
    flat = np.concatenate([*words, parent])
    assert np.unique(flat).size == flat.size


def test_two_pipelines_on_one_generator_draw_differently() -> None:
    """Two views of one image (contrastive learning) must not share augmentations."""
    x = torch.rand(3, 24, 24)
    pipe = Compose([RandomResizedCrop(12), GaussianNoise(0.1)])
    rng = sample_generator(0, 0, 0)
    view1, view2 = pipe(x, rng), pipe(x, rng)
    assert not torch.equal(view1, view2)
    rng = sample_generator(0, 0, 0)
    again = pipe(x, rng), pipe(x, rng)
    assert torch.equal(again[0], view1) and torch.equal(again[1], view2)


def test_non_philox_generator_falls_back_deterministically() -> None:
    x = torch.rand(3, 24, 24)
    pipe = pipeline()
    a = pipe(x, np.random.default_rng(7))
    assert torch.equal(a, pipe(x, np.random.default_rng(7)))
    assert not torch.equal(a, pipe(x, np.random.default_rng(8)))
    log1: dict = {}
    log2: dict = {}
    Compose([Record(log1, "a")])(None, np.random.default_rng(1))
    Compose([Record(log2, "a"), Record(log2, "b")])(None, np.random.default_rng(1))
    assert log1["a"] == log2["a"]


def test_compose_recovers_its_depth_after_an_error() -> None:
    def boom(sample, rng):
        raise KeyError("boom")

    with pytest.raises(KeyError):
        Compose([Compose([boom])])(None, sample_generator(0, 0, 0))
    assert _compose._scratch.depth == 0
    assert recorded(lambda log: [Record(log, "a")]) == recorded(lambda log: [Record(log, "a")])


def test_random_apply_and_choice() -> None:
    flip = RandomHorizontalFlip(1.0)
    x = torch.arange(6.0).reshape(1, 2, 3)
    assert torch.equal(RandomApply(flip, p=0.0)(x, sample_generator(0, 0, 0)), x)
    assert torch.equal(RandomApply(flip, p=1.0)(x, sample_generator(0, 0, 0)), x.flip(2))
    applied = [
        RandomApply(flip, p=0.3)(x, sample_generator(0, 0, i)).equal(x.flip(2)) for i in range(400)
    ]
    assert 0.2 < np.mean(applied) < 0.4
    picks = [
        RandomChoice([lambda s, r: "a", lambda s, r: "b", lambda s, r: "c"], p=[1, 0, 3])(
            None, sample_generator(0, 0, i)
        )
        for i in range(400)
    ]
    assert "b" not in picks and 0.65 < picks.count("c") / 400 < 0.85


# --- TransformedDataset and from_global_rng -------------------------------------------------


class Images:
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int):
        return torch.full((3, 16, 16), index / 6), index


def test_transformed_dataset_needs_a_fetch_or_an_explicit_key() -> None:
    ds = TransformedDataset(Images(), RandomResizedCrop(8), field=0)
    assert len(ds) == 6
    with pytest.raises(RuntimeError, match=r"StatefulDataLoader.*ds\.get\(index"):
        ds[0]
    image, label = ds.get(2, seed=0, epoch=1)
    assert image.shape == (3, 8, 8) and label == 2
    with sample_scope(0, 1, 2):
        inside = ds[2]
    assert torch.equal(inside[0], image)
    assert torch.equal(ds.get(2, seed=0, epoch=1)[0], image)


def test_transformed_dataset_field_selects_the_transformed_entry() -> None:
    class Dicts:
        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: int):
            return {"image": torch.zeros(1, 4, 4), "label": index}

    ds = TransformedDataset(Dicts(), GaussianNoise(1.0), field="image")
    out = ds.get(1, seed=0, epoch=0)
    assert out["label"] == 1 and out["image"].abs().sum() > 0
    whole = TransformedDataset(Images(), lambda s, r: s)
    assert whole.get(3, seed=0, epoch=0)[1] == 3
    with pytest.raises(ValueError, match="field='missing'"):
        TransformedDataset(Dicts(), GaussianNoise(1.0), field="missing").get(0, seed=0, epoch=0)


def third_party(sample):
    """Stands in for a torchvision transform: draws from all three global RNGs."""
    return sample + torch.rand(2), np.random.rand(), random.random()


def test_from_global_rng_is_deterministic_per_key_and_restores_globals() -> None:
    wrapped = from_global_rng(third_party)
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    before = torch.get_rng_state(), np.random.get_state(), random.getstate()
    a = wrapped(torch.zeros(2), sample_generator(0, 0, 1))
    assert torch.equal(torch.get_rng_state(), before[0])
    assert np.array_equal(np.random.get_state()[1], before[1][1])
    assert random.getstate() == before[2]
    torch.rand(5), np.random.rand(), random.random()  # the caller moves on; the key still rules
    b = wrapped(torch.zeros(2), sample_generator(0, 0, 1))
    assert torch.equal(a[0], b[0]) and a[1:] == b[1:]
    c = wrapped(torch.zeros(2), sample_generator(0, 0, 2))
    assert not torch.equal(a[0], c[0]) and a[1] != c[1] and a[2] != c[2]


def test_from_global_rng_restores_globals_on_error() -> None:
    def fails(sample):
        torch.rand(1)
        raise OSError("disk")

    before = torch.get_rng_state()
    with pytest.raises(OSError):
        from_global_rng(fails)(None, sample_generator(0, 0, 0))
    assert torch.equal(torch.get_rng_state(), before)


# --- operations: shape, dtype, range, kind --------------------------------------------------

KINDS = ["numpy", "torch"]
LAYOUTS = ["CHW", "HWC"]
DTYPES = ["float32", "uint8"]


def spatial(x, layout: str) -> tuple[int, int]:
    return tuple(x.shape[1:]) if layout == "CHW" else tuple(x.shape[:2])  # type: ignore[return-value]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_operations_keep_kind_dtype_range_and_layout(kind: str, layout: str, dtype: str) -> None:
    x = image(kind, layout, dtype)
    high = 1.0 if dtype == "float32" else 255
    ops = {
        RandomCrop((10, 12), padding=2, layout=layout): (10, 12),
        RandomResizedCrop((9, 11), layout=layout): (9, 11),
        RandomHorizontalFlip(0.5, layout=layout): (20, 24),
        RandomVerticalFlip(0.5, layout=layout): (20, 24),
        RandomRotation90(k=(0, 2), layout=layout): (20, 24),
        ColorJitter(0.5, (0.5, 1.5), layout=layout): (20, 24),
        RandomErasing(1.0, value="random" if dtype == "uint8" else 0.5, layout=layout): (20, 24),
        GaussianNoise(0.1 * high, clip=(0.0, high)): (20, 24),
    }
    original = as_numpy(x).copy()
    for op, size in ops.items():
        for index in range(4):
            y = op(x, sample_generator(0, 0, index))
            assert type(y) is type(x), op
            assert str(y.dtype).split(".")[-1] == dtype, op
            assert y.ndim == 3 and spatial(y, layout) == size, op
            channels = y.shape[0] if layout == "CHW" else y.shape[2]
            assert channels == 3, op
            values = as_numpy(y)
            assert values.min() >= 0 and values.max() <= high, op
    assert np.array_equal(as_numpy(x), original)  # inputs are never modified


def test_rotation_by_odd_quarter_turns_swaps_height_and_width() -> None:
    x = torch.rand(2, 5, 7)
    assert RandomRotation90(k=(1,))(x, sample_generator(0, 0, 0)).shape == (2, 7, 5)
    y = RandomRotation90(k=(1,), layout="HWC")(x.numpy(), sample_generator(0, 0, 0))
    assert np.array_equal(y, np.rot90(x.numpy(), 1, (0, 1)))


def test_crop_is_a_window_of_the_input() -> None:
    x = np.arange(3 * 20 * 24).reshape(3, 20, 24)
    for index in range(10):
        y = RandomCrop((5, 6))(x, sample_generator(0, 0, index))
        top, left = np.argwhere(x[0] == y[0, 0, 0])[0]
        assert np.array_equal(y, x[:, top : top + 5, left : left + 6])
    padded = RandomCrop(20, padding=3)(torch.ones(1, 20, 20), sample_generator(0, 0, 1))
    assert padded.shape == (1, 20, 20) and padded.min() == 0  # some padding shows


def test_flips_and_identities() -> None:
    x = torch.rand(3, 6, 8)
    rng = sample_generator(0, 0, 0)
    assert torch.equal(RandomHorizontalFlip(1.0)(x, rng), x.flip(2))
    assert torch.equal(RandomVerticalFlip(1.0)(x, rng), x.flip(1))
    hwc = x.permute(1, 2, 0).numpy()
    assert np.array_equal(RandomHorizontalFlip(1.0, layout="HWC")(hwc, rng), hwc[:, ::-1])
    assert RandomHorizontalFlip(0.0)(x, rng) is x
    full = RandomResizedCrop(6, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    assert torch.equal(full(x[:, :, :6], rng), x[:, :, :6])
    assert torch.equal(ColorJitter(0.0, 0.0)(x, rng), x)
    assert torch.equal(GaussianNoise(0.0)(x, rng), x)
    assert torch.equal(RandomErasing(0.0)(x, rng), x)


def test_resized_crop_interpolates_bilinearly() -> None:
    x = torch.linspace(0, 1, 16).reshape(1, 1, 16).expand(3, 16, 16).contiguous()
    y = RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(1.0, 1.0))(x, sample_generator(0, 0, 0))
    expected = torch.nn.functional.interpolate(x[None], size=(8, 8), mode="bilinear")[0]
    assert torch.equal(y, expected)
    u8 = (x * 255).to(torch.uint8)
    assert RandomResizedCrop(8)(u8, sample_generator(0, 0, 0)).dtype == torch.uint8


def test_gaussian_noise_statistics_and_integer_rounding() -> None:
    x = np.zeros((64, 64), dtype=np.float64)
    y = GaussianNoise(2.0, mean=1.0)(x, sample_generator(0, 0, 0))
    assert y.dtype == np.float64 and abs(y.mean() - 1.0) < 0.1 and abs(y.std() - 2.0) < 0.1
    u8 = np.full((8, 8), 250, dtype=np.uint8)
    noisy = GaussianNoise(20.0)(u8, sample_generator(0, 0, 0))
    assert noisy.dtype == np.uint8 and noisy.max() == 255 and noisy.min() < 250


def test_color_jitter_brightness_scales_and_clamps() -> None:
    x = torch.full((3, 4, 4), 0.5)
    y = ColorJitter(brightness=(2.0, 2.0))(x, sample_generator(0, 0, 0))
    assert torch.equal(y, torch.ones_like(x))
    contrast = ColorJitter(contrast=(0.0, 0.0))(torch.rand(3, 4, 4), sample_generator(0, 0, 0))
    assert torch.allclose(contrast, contrast[:, :1, :1].expand_as(contrast))  # a flat image


def test_erasing_fills_a_box_on_all_channels_and_spans_on_sequences() -> None:
    x = torch.ones(3, 20, 20)
    y = RandomErasing(1.0, value=0.0)(x, sample_generator(0, 0, 0))
    erased = y == 0
    assert erased.any() and torch.equal(erased[0], erased[1]) and torch.equal(erased[0], erased[2])
    rows, cols = torch.nonzero(erased[0], as_tuple=True)
    box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
    assert int(erased[0].sum()) == int(box)
    seq = RandomErasing(1.0, scale=(0.25, 0.25), value=-1.0)(np.ones(40), sample_generator(0, 0, 0))
    assert (seq == -1).sum() == 10 and np.all(np.diff(np.flatnonzero(seq == -1)) == 1)


def test_one_dimensional_sequences() -> None:
    seq = torch.arange(50)
    rng = sample_generator(0, 0, 0)
    cropped = RandomCrop(20)(seq, rng)
    assert cropped.shape == (20,) and torch.equal(cropped, torch.arange(20) + cropped[0])
    assert torch.equal(RandomHorizontalFlip(1.0)(seq, rng), seq.flip(0))
    assert GaussianNoise(0.5)(seq.float(), rng).shape == (50,)
    with pytest.raises(ValueError, match="image"):
        RandomVerticalFlip(1.0)(seq, rng)
    with pytest.raises(ValueError, match="int size"):
        RandomCrop((4, 4))(seq, rng)


@pytest.mark.parametrize("kind", KINDS)
def test_token_mask(kind: str) -> None:
    tokens = np.arange(1, 2001, dtype=np.int32) % 50
    x = torch.from_numpy(tokens) if kind == "torch" else tokens
    y = TokenMask(0.3, mask_token=99, keep=(0,))(x, sample_generator(0, 0, 0))
    assert type(y) is type(x) and as_numpy(y).dtype == np.int32
    values = as_numpy(y)
    masked = values == 99
    assert 0.25 < masked.mean() < 0.35
    assert np.array_equal(values[~masked], tokens[~masked])
    assert not masked[tokens == 0].any()  # kept tokens are never masked
    assert np.array_equal(
        as_numpy(TokenMask(1.0, 7)(x, sample_generator(0, 0, 0))), np.full(2000, 7)
    )
    with pytest.raises(TypeError, match="integer token ids"):
        TokenMask(0.1, 0)(x.astype(np.float32) if kind == "numpy" else x.float(), None)
    with pytest.raises(ValueError, match="does not fit"):
        TokenMask(0.1, 300)(np.zeros(3, dtype=np.uint8), sample_generator(0, 0, 0))


# --- batch mixes ---------------------------------------------------------------------------


def batch(n: int = 8):
    x = torch.arange(n, dtype=torch.float32).reshape(n, 1, 1, 1).expand(n, 3, 10, 10).contiguous()
    return x, torch.arange(n) % 5


@pytest.mark.parametrize("mix", [MixUp(0.4, num_classes=5), CutMix(1.0, num_classes=5)])
def test_mixes_shapes_label_sums_and_determinism(mix) -> None:
    x, y = batch()
    bx, by = mix((x, y), batch_generator(0, 1, 3, range(8)))
    assert bx.shape == x.shape and by.shape == (8, 5) and by.dtype == torch.float32
    torch.testing.assert_close(by.sum(1), torch.ones(8))
    again = mix((x, y), batch_generator(0, 1, 3, range(8)))
    assert torch.equal(again[0], bx) and torch.equal(again[1], by)
    other = mix((x, y), batch_generator(0, 1, 4, range(8)))
    assert not torch.equal(other[0], bx)
    assert isinstance(mix([x, y], batch_generator(0, 1, 3, range(8))), list)
    as_dict = mix({"input": x, "target": y, "index": 7}, batch_generator(0, 1, 3, range(8)))
    assert torch.equal(as_dict["input"], bx) and as_dict["index"] == 7
    soft = mix((x, torch.nn.functional.one_hot(y, 5).float()), batch_generator(0, 1, 3, range(8)))
    assert torch.equal(soft[1], by)
    arrays = mix((x.numpy(), y.numpy()), batch_generator(0, 1, 3, range(8)))
    assert isinstance(arrays[0], np.ndarray) and np.array_equal(arrays[1], by.numpy())


def test_cutmix_target_weight_is_the_pasted_area() -> None:
    x, _ = batch()
    labels = torch.arange(8)
    for step in range(10):
        bx, by = CutMix(1.0, num_classes=8)((x, labels), batch_generator(0, 0, step, range(8)))
        own = (bx[:, 0] == x[:, 0]).float().mean(dim=(1, 2))
        torch.testing.assert_close(by[torch.arange(8), labels], own)
    hwc = x.permute(0, 2, 3, 1).contiguous()
    cutmix = CutMix(1.0, num_classes=8, layout="HWC")
    out, _ = cutmix((hwc, labels), batch_generator(0, 0, 1, range(8)))
    assert out.shape == hwc.shape


def test_mixup_blends_by_lambda() -> None:
    x, y = batch()
    bx, by = MixUp(1.0, num_classes=5)((x, y), batch_generator(0, 0, 0, range(8)))
    lam = by[torch.arange(8), y].min()  # the own label keeps weight λ (or more, on a tie)
    assert torch.allclose(bx[:, 0, 0, 0], bx[:, 2, 9, 9])  # every pixel blended the same way
    assert 0.0 <= float(lam) <= 1.0


# --- bad input -----------------------------------------------------------------------------

BAD = [
    (lambda: RandomApply(RandomCrop(4), p=1.5), ValueError, r"p must be a probability in \[0, 1\]"),
    (lambda: RandomApply(RandomCrop(4), p="0.5"), TypeError, "p must be a probability"),
    (lambda: RandomApply([RandomCrop(4)]), TypeError, "Compose"),
    (lambda: RandomHorizontalFlip(-0.1), ValueError, "probability"),
    (lambda: RandomErasing(p=float("nan")), ValueError, "probability"),
    (lambda: Compose([RandomCrop(4), "flip"]), TypeError, "step 1 must be callable"),
    (lambda: Compose(RandomCrop(4)), TypeError, "list of transforms"),
    (lambda: Compose({1: RandomCrop(4)}), TypeError, "names must be str"),
    (lambda: RandomChoice([]), ValueError, "must not be empty"),
    (lambda: RandomChoice([RandomCrop(4)], p=[0.5, 0.5]), ValueError, "one weight per"),
    (lambda: RandomChoice([RandomCrop(4)], p=[0.0]), ValueError, "positive weight"),
    (lambda: RandomCrop(0), ValueError, "positive int"),
    (lambda: RandomCrop(2.5), TypeError, "positive int"),
    (lambda: RandomCrop((4, 4, 4)), ValueError, "pair"),
    (lambda: RandomCrop(4, padding=-1), ValueError, "padding"),
    (lambda: RandomCrop(4, layout="NCHW"), ValueError, "layout must be"),
    (lambda: RandomResizedCrop(8, scale=(0.5, 0.1)), ValueError, "scale"),
    (lambda: RandomResizedCrop(8, ratio=(0, 1)), ValueError, "ratio"),
    (lambda: RandomRotation90(k=(1, 4)), ValueError, "0..3"),
    (lambda: GaussianNoise(-1.0), ValueError, "std"),
    (lambda: ColorJitter(brightness=-0.5), ValueError, "brightness"),
    (lambda: RandomErasing(value="noise"), ValueError, "'random'"),
    (lambda: RandomErasing(ratio=(0.0, 1.0)), ValueError, "0.0 < min"),
    (lambda: TokenMask(0.1, mask_token=1.5), TypeError, "mask_token"),
    (lambda: MixUp(0.0), ValueError, "alpha must be > 0"),
    (lambda: MixUp(1.0, num_classes=0), ValueError, "num_classes"),
    (lambda: from_global_rng(42), TypeError, r"fn\(sample\) -> sample"),
    (lambda: TransformedDataset([1, 2], "crop"), TypeError, "transform must be callable"),
    (lambda: TransformedDataset(iter([1]), RandomCrop(4)), TypeError, "map-style"),
    (lambda: batch_generator(0, -1, 0, [0]), ValueError, "epoch"),
    (lambda: batch_generator(0, 0, 0, 3), TypeError, "indices"),
    (lambda: batch_generator(0, 0, 0, [-1]), ValueError, "index"),
]


@pytest.mark.parametrize(("make", "error", "message"), BAD)
def test_bad_arguments_raise_clear_errors(make, error, message) -> None:
    with pytest.raises(error, match=message):
        make()


def test_bad_samples_raise_clear_errors() -> None:
    rng = sample_generator(0, 0, 0)
    with pytest.raises(ValueError, match=r"must fit in the padded input \(8, 8\)"):
        RandomCrop(10)(torch.zeros(3, 8, 8), rng)
    with pytest.raises(TypeError, match=r"numpy\.ndarray or a torch\.Tensor"):
        RandomHorizontalFlip()([1, 2, 3], rng)
    with pytest.raises(TypeError, match=r"numpy\.random\.Generator"):
        Compose([])(torch.zeros(1), torch.Generator())
    with pytest.raises(TypeError, match="floating point"):
        MixUp(num_classes=5)(
            (torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.zeros(2).long()), rng
        )
    with pytest.raises(ValueError, match="num_classes is needed"):
        MixUp()((torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.long)), rng)
    with pytest.raises(ValueError, match=r"class indices must be in \[0, 3\)"):
        MixUp(num_classes=3)((torch.zeros(2, 3, 4, 4), torch.tensor([0, 3])), rng)
    with pytest.raises(ValueError, match="inputs hold 2 samples but targets 3"):
        CutMix(num_classes=3)((torch.zeros(2, 3, 4, 4), torch.tensor([0, 1, 2])), rng)
    with pytest.raises(TypeError, match="'input' and 'target'"):
        CutMix(num_classes=3)({"x": torch.zeros(2, 3, 4, 4)}, rng)
    with pytest.raises(ValueError, match="does not fit dtype"):
        RandomErasing(1.0, value=300)(torch.zeros(3, 9, 9, dtype=torch.uint8), rng)


# --- with the loader -----------------------------------------------------------------------


class Labelled(torch.utils.data.Dataset):
    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        return torch.linspace(0, 1, 3 * 12 * 12).reshape(3, 12, 12) * (index + 1) / 10, index


def global_rng_shift(x: torch.Tensor) -> torch.Tensor:  # picklable for any start method
    return x + 0.01 * torch.rand(1)


def full_pipeline_loader(num_workers: int = 0, batch_transform=None, **kw):
    import seekdata

    pipe = Compose(
        {
            "crop": RandomResizedCrop(8),
            "flip": RandomHorizontalFlip(),
            "color": RandomApply(ColorJitter(0.4, 0.4), p=0.8),
            "third_party": from_global_rng(global_rng_shift),
            "noise": GaussianNoise(0.05),
            "erase": RandomErasing(0.5),
        }
    )
    return seekdata.StatefulDataLoader(
        TransformedDataset(Labelled(), pipe, field=0),
        batch_size=3,
        shuffle=True,
        seed=5,
        num_workers=num_workers,
        batch_transform=batch_transform,
        **kw,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_full_pipeline_resumes_exactly_mid_epoch_and_at_epoch_end(workers: int) -> None:
    from seekdata.testing import assert_exact_resume

    mix = RandomChoice([MixUp(0.4, num_classes=10), CutMix(1.0, num_classes=10)])
    make = functools.partial(full_pipeline_loader, batch_transform=mix, num_workers=workers)
    # 4 batches per epoch: stop mid-epoch (2), exactly at the epoch end (4) and in epoch 1 (6)
    checked = assert_exact_resume(
        make, epochs=2, stop_at=[2, 4, 6], resume_kwargs={"num_workers": 2 - workers}
    )
    assert checked == 3


def test_loader_samples_equal_get_and_batch_streams_equal_batch_generator() -> None:
    seen: list[tuple[list[int], float]] = []

    def record(batch, rng):
        seen.append((batch[1].tolist(), float(rng.random())))
        return batch

    loader = full_pipeline_loader(0, record)
    ds = loader.dataset
    for epoch in range(2):
        loader.set_epoch(epoch)
        for step, (images, indices) in enumerate(loader):
            for image, index in zip(images, indices.tolist(), strict=True):
                assert torch.equal(image, ds.get(index, seed=5, epoch=epoch)[0])
            batch_indices, draw = seen[-1]
            assert draw == batch_generator(5, epoch, step, indices=batch_indices).random()
    plain = batch_generator(5, 1, 2, [4, 0]).random(4)
    digest = zlib.crc32(np.asarray([4, 0], dtype=np.int64).tobytes())
    assert np.array_equal(plain, numpy_generator(5, BATCH, 1, 2, digest).random(4))
