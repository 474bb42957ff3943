"""Augmentation pipelines on explicit, counter-derived random streams.

A transform is a callable ``(sample, rng) -> sample`` with ``rng`` a
``numpy.random.Generator``. Inside a seekdata loader, :class:`TransformedDataset` passes
the sample's stream (a pure function of seed, epoch and dataset index), so a sample gets
the same augmentation on any worker, rank or resume. Batch transforms
``(batch, rng) -> batch`` (:class:`MixUp`, :class:`CutMix`) get the batch's stream from the
loader's ``batch_transform=``: :func:`batch_generator` (``seekdata.rng.batch_generator``),
keyed by (seed, epoch, step on this rank, digest of the batch's indices).

:class:`Compose` runs each step on its own sub-stream keyed by the step's position (or
name), so adding a step leaves the others' randomness unchanged; see
``seekdata.transforms._compose`` for the derivation.
"""

from seekdata._core.streams import batch_generator
from seekdata.transforms._batchmix import CutMix, MixUp
from seekdata.transforms._compose import Compose, RandomApply, RandomChoice, Transform
from seekdata.transforms._geometric import (
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation90,
    RandomVerticalFlip,
)
from seekdata.transforms._intensity import ColorJitter, GaussianNoise
from seekdata.transforms._masking import RandomErasing, TokenMask
from seekdata.transforms._wrap import TransformedDataset, from_global_rng

__all__ = [
    "ColorJitter",
    "Compose",
    "CutMix",
    "GaussianNoise",
    "MixUp",
    "RandomApply",
    "RandomChoice",
    "RandomCrop",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomRotation90",
    "RandomVerticalFlip",
    "TokenMask",
    "Transform",
    "TransformedDataset",
    "batch_generator",
    "from_global_rng",
]
