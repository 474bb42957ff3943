"""seekdata: exactly resumable PyTorch training data.

Every random decision is a pure function of counters, so the data pipeline's checkpoint is a
cursor of a few integers and resume is an O(1) seek, on any number of ranks and workers.
"""

# The names below are imported on first use (PEP 562), so that ``import seekdata.tools.cli``
# (the ``seekdata`` command) and the torch-free modules start without importing torch.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from seekdata import _lazy

if _TYPE_CHECKING:
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
    from seekdata.training import capture_rng, exit_ddp, restore_rng, set_step_rng

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
    "exit_ddp",
    "numpy_generator",
    "restore_rng",
    "sample_generator",
    "sample_rng",
    "set_step_rng",
    "torch_generator",
]

#: name -> the module that defines it; a module's own name maps to itself
_WHERE = {
    "checkpoint": "seekdata.checkpoint",
    "elastic": "seekdata.elastic",
    "order": "seekdata.order",
    "rng": "seekdata.rng",
    "testing": "seekdata.testing",
    "transforms": "seekdata.transforms",
    "DistributedSampler": "seekdata.sampler",
    "Growth": "seekdata._core.growth",
    "Mixture": "seekdata.sources.mixtures.mixture",
    "PreemptionHandler": "seekdata.preemption",
    "StateMismatchError": "seekdata.state",
    "StatefulDataLoader": "seekdata.loader",
    "capture_rng": "seekdata.training",
    "exit_ddp": "seekdata.training",
    "numpy_generator": "seekdata.rng",
    "restore_rng": "seekdata.training",
    "sample_generator": "seekdata.rng",
    "sample_rng": "seekdata.rng",
    "set_step_rng": "seekdata.training",
    "torch_generator": "seekdata.rng",
}


__getattr__, __dir__ = _lazy.exports(__name__, globals(), _WHERE)
