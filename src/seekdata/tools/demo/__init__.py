"""The demos of ``python -m seekdata.demo``: real torchrun jobs killed and resumed.

- :mod:`seekdata.tools.demo.preempted`: ``python -m seekdata.demo``, a DDP job SIGKILLed at a
  time limit and resubmitted, bit-identical to the uninterrupted job;
- :mod:`seekdata.tools.demo.elastic`: ``python -m seekdata.demo --elastic``, torchrun loses a
  node and gets it back, every step the same samples;
- :mod:`seekdata.tools.demo.supervisor`: the one torchrun supervisor both use (start a job,
  kill it as a cluster's time limit does);
- :mod:`seekdata.tools.demo.figures`: their plots' matplotlib, optional (the ``demo`` extra);
- :mod:`seekdata.tools.demo.elastic_train`: the elastic demo's training script, shipped in the
  package so that the demo runs from a wheel (``examples/elastic_train.py`` runs it).
"""

from seekdata.tools.demo.preempted import main

__all__ = ["main"]
