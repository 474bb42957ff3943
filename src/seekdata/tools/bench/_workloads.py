"""Workloads for the throughput benchmarks, and the loaders seekdata is measured against.

- :class:`TokenWindows`: a language-model sample, a window of token ids (a few µs).
- :class:`Images`: JPEG decode + RandomResizedCrop + horizontal flip + normalise (~1 ms),
  with torchvision when it is installed, else PIL and torch doing the same steps.
- :func:`arrow_table`: a Hugging Face ``datasets`` table of float rows (an Arrow read of a
  whole batch per ``__getitems__`` call), when ``datasets`` is installed.
- :class:`MemmapRows`: float rows in a file read through a numpy memmap, with a batched read
  (``__getitems__``) of its own: the same kind of source without ``datasets``.
- :class:`Reseeding`: what a DataLoader user writes for per-sample reproducibility: reseed
  the same three global generators seekdata reseeds before each sample (once per batch for a
  batched read: :class:`ReseedingBatches`). It is the fair baseline for seekdata's default
  ``reseed_global_rng=True``.
- :func:`grain_loader`: Grain's DataLoader over the same dataset, when Grain is installed.
"""

from __future__ import annotations

import io
import pathlib
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

from seekdata._core.globalrng import GENERATORS

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


class TokenWindows(torch.utils.data.Dataset):
    """Sample i: ``length`` token ids (int64) from a shared uint16 corpus, starting near
    ``i * length`` at an offset of up to 15 tokens drawn from numpy's global RNG."""

    def __init__(self, n: int, length: int = 2048, corpus_tokens: int = 1 << 23) -> None:
        self.n, self.length = n, length
        self.tokens = (np.arange(corpus_tokens, dtype=np.uint64) * _GOLDEN >> 48).astype(np.uint16)
        self.span = corpus_tokens - length - 16

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        start = index * self.length % self.span + int(np.random.random() * 16)
        return torch.from_numpy(self.tokens[start : start + self.length].astype(np.int64))


def _jpegs(count: int, size: int) -> list[bytes]:
    """``count`` distinct size x size RGB JPEGs: gradients with noise, like photos compress."""
    from PIL import Image

    out = []
    gen = np.random.Generator(np.random.Philox(key=7))  # fixed content; never global RNG
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    for k in range(count):
        base = (ramp[None, :, None] * (k % 3 + 1) / 3 + ramp[:, None, None] / 2) % 256
        pixels = base + gen.normal(0, 12, (size, size, 3))
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


class Images(torch.utils.data.Dataset):
    """ImageNet-style training sample: decode a JPEG, RandomResizedCrop to ``crop``, flip with
    p = 0.5, convert to float and normalise; the randomness comes from torch's global RNG (as
    torchvision's transforms draw it). ``backend`` is ``"torchvision"`` when it is installed,
    else ``"PIL"`` (the same steps with PIL and torch)."""

    def __init__(self, n: int, size: int = 256, crop: int = 224, distinct: int = 32) -> None:
        self.n, self.crop = n, crop
        self.jpegs = _jpegs(distinct, size)
        try:
            import torchvision  # noqa: F401  # optional: the PIL path below does the same
        except ImportError:
            self.backend = "PIL"
        else:
            self.backend = "torchvision"
        self._pipeline: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        data = self.jpegs[index % len(self.jpegs)]
        if self.backend == "torchvision":
            return self._torchvision(data)
        return self._pil(data)

    def _torchvision(self, data: bytes) -> torch.Tensor:
        from torchvision.io import decode_jpeg
        from torchvision.transforms import v2

        if self._pipeline is None:  # built in the process that uses it (workers included)
            self._pipeline = v2.Compose(
                [
                    v2.RandomResizedCrop(self.crop, antialias=True),
                    v2.RandomHorizontalFlip(),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize(_MEAN, _STD),
                ]
            )
        image = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        result: torch.Tensor = self._pipeline(image)
        return result

    def _pil(self, data: bytes) -> torch.Tensor:
        from PIL import Image

        image = Image.open(io.BytesIO(data)).convert("RGB")
        w, h = image.size
        u = torch.rand(4).tolist()  # scale, log-ratio, x, y: as RandomResizedCrop's first try
        area = w * h * (0.08 + 0.92 * u[0])
        ratio = float(np.exp(np.log(3 / 4) + (np.log(4 / 3) - np.log(3 / 4)) * u[1]))
        cw = max(1, min(w, round((area * ratio) ** 0.5)))
        ch = max(1, min(h, round((area / ratio) ** 0.5)))
        x, y = int(u[2] * (w - cw + 1)), int(u[3] * (h - ch + 1))
        box = (x, y, x + cw, y + ch)
        image = image.resize((self.crop, self.crop), Image.Resampling.BILINEAR, box)
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div_(255)
        mean, std = torch.tensor(_MEAN).view(3, 1, 1), torch.tensor(_STD).view(3, 1, 1)
        return pixels.sub_(mean).div_(std)


def datasets_available() -> bool:
    try:
        import datasets  # noqa: F401  # optional: the Arrow workload needs it
    except ImportError:
        return False
    return True


def arrow_table(n: int, dim: int = 64) -> Any:
    """Issue 20's table: ``datasets.Dataset.from_dict`` of ``n`` rows of ``dim`` floats (column
    ``"x"``), ``with_format("torch")``. ``__getitems__`` reads a batch in one Arrow call (~2 ms
    for 256 rows), ``__getitem__`` one row (~90 µs)."""
    import datasets

    rows = np.random.default_rng(0).random((n, dim)).tolist()  # fixed content; not global RNG
    return datasets.Dataset.from_dict({"x": rows}).with_format("torch")


class MemmapRows(torch.utils.data.Dataset):
    """``n`` rows of ``dim`` values of ``dtype`` in the file ``path``, read through a numpy
    memmap (opened in each process that reads): float32 rows come back as float32 tensors,
    ``uint16`` rows (token ids, as a pretokenised corpus stores them) as int64. ``__getitem__``
    reads one row; ``__getitems__`` reads the batch's rows with one fancy-indexed read and
    returns them as a list of row tensors, which torch's collation stacks: a batched source as
    one writes it for torch's DataLoader."""

    def __init__(
        self, path: str | pathlib.Path, n: int, dim: int = 64, dtype: str = "float32"
    ) -> None:
        self.path, self.n, self.dim, self.dtype = str(path), n, dim, np.dtype(dtype)
        self.out = np.dtype(np.int64) if self.dtype.kind == "u" else self.dtype
        self._rows: np.memmap | None = None

    @classmethod
    def create(
        cls, path: str | pathlib.Path, n: int, dim: int = 64, dtype: str = "float32"
    ) -> MemmapRows:
        """Write ``n`` rows of fixed random values to ``path`` and open them."""
        gen = np.random.default_rng(0)  # fixed content; never global RNG
        kind = np.dtype(dtype)
        if kind.kind == "u":
            rows = gen.integers(0, np.iinfo(kind).max, (n, dim), dtype=kind)
        else:
            rows = gen.random((n, dim)).astype(kind)
        rows.tofile(path)
        return cls(path, n, dim, dtype)

    @property
    def rows(self) -> np.memmap:
        if self._rows is None:
            self._rows = np.memmap(self.path, self.dtype, "r", shape=(self.n, self.dim))
        return self._rows

    def __getstate__(self) -> dict[str, Any]:  # a spawned worker opens the file itself
        return {**self.__dict__, "_rows": None}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.rows[index].astype(self.out))

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        return list(torch.from_numpy(self.rows[indices].astype(self.out, copy=False)))


class Reseeding(torch.utils.data.Dataset):
    """Wraps a dataset so that torch's DataLoader reseeds the global generators in
    ``generators`` before each sample, with seeds of the widths seekdata uses (32, 32 and 64
    bits) and the same calls a user would make. The seed is a cheap function of the index here
    (a baseline imitating user code); seekdata itself derives it by hashing (seed, epoch,
    index)."""

    def __init__(self, dataset: Any, generators: Sequence[str] = GENERATORS) -> None:
        self.dataset = dataset
        self.generators = tuple(generators)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        self._reseed(index)
        return self.dataset[index]

    def _reseed(self, index: int) -> None:
        h = (index + 1) * _GOLDEN & _MASK64
        if "torch" in self.generators:
            torch.default_generator.manual_seed(h & 0xFFFFFFFF)
        if "numpy" in self.generators:
            np.random.seed(h >> 32)
        if "random" in self.generators:
            random.seed(h)


class ReseedingBatches(Reseeding):
    """:class:`Reseeding` for a dataset with a batched read: the same reseeds once per batch
    (from its first index), then one ``__getitems__`` call, as torch's DataLoader makes it."""

    def __getitems__(self, indices: list[int]) -> Any:
        self._reseed(indices[0])
        return self.dataset.__getitems__(indices)


def grain_available() -> bool:
    try:
        import grain  # noqa: F401  # an optional anchor
    except ImportError:
        return False
    return True


def grain_loader(dataset: Any, batch_size: int, num_workers: int, seed: int = 0) -> Any:
    """Grain's DataLoader over a map-style ``dataset``: shuffled, batched, one epoch. Batches
    are numpy arrays; grain pins nothing."""
    import grain
    from absl import flags

    if not flags.FLAGS.is_parsed():  # grain reads absl flags, which only absl.app.run parses
        flags.FLAGS.mark_as_parsed()
    sampler = grain.samplers.IndexSampler(
        num_records=len(dataset),
        shard_options=grain.sharding.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=seed,
    )
    return grain.DataLoader(
        data_source=_GrainSource(dataset),
        sampler=sampler,
        operations=[grain.transforms.Batch(batch_size=batch_size, drop_remainder=True)],
        worker_count=num_workers,
    )


class _GrainSource:
    """A map-style dataset as Grain's RandomAccessDataSource: samples as numpy arrays."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        sample = self.dataset[index]
        return sample.numpy() if isinstance(sample, torch.Tensor) else sample
