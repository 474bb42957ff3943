"""seekdata: exactly resumable PyTorch training data.

Every random decision is a pure function of counters, so the data pipeline's checkpoint is a
cursor of a few integers and resume is an O(1) seek, on any number of ranks and workers.
"""

from seekdata.loader import StatefulDataLoader
from seekdata.rng import numpy_generator, sample_generator, sample_rng, torch_generator
from seekdata.sampler import DistributedSampler
from seekdata.state import StateMismatchError

__version__ = "0.1.0"

__all__ = [
    "DistributedSampler",
    "StateMismatchError",
    "StatefulDataLoader",
    "__version__",
    "numpy_generator",
    "sample_generator",
    "sample_rng",
    "torch_generator",
]
