"""seekdata: exactly resumable PyTorch training data.

Every random decision is a pure function of counters, so the data pipeline's checkpoint is a
cursor of a few integers and resume is an O(1) seek, on any number of ranks and workers.
"""

# submodules, importable as attributes (seekdata.checkpoint.save, seekdata.transforms.Compose)
from seekdata import checkpoint as checkpoint
from seekdata import elastic as elastic
from seekdata import order as order
from seekdata import rng as rng
from seekdata import testing as testing
from seekdata import transforms as transforms
from seekdata._core.growth import Growth
from seekdata.loader import StatefulDataLoader
from seekdata.preemption import PreemptionHandler
from seekdata.rng import numpy_generator, sample_generator, sample_rng, torch_generator
from seekdata.sampler import DistributedSampler
from seekdata.sources.mixtures.mixture import Mixture
from seekdata.state import StateMismatchError
from seekdata.training import capture_rng, restore_rng, set_step_rng

__version__ = "0.1.0"

__all__ = [
    "DistributedSampler",
    "Growth",
    "Mixture",
    "PreemptionHandler",
    "StateMismatchError",
    "StatefulDataLoader",
    "__version__",
    "capture_rng",
    "numpy_generator",
    "restore_rng",
    "sample_generator",
    "sample_rng",
    "set_step_rng",
    "torch_generator",
]
