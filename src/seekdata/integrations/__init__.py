"""Integrations with the frameworks that rebuild, wrap or skip loaders.

Each submodule imports its framework when it is imported, never before: ``import seekdata``
imports none of them.

- :mod:`seekdata.integrations.accelerate`: ``accelerator.prepare`` keeps a seekdata loader
  (sharded, unrebuilt); :func:`~seekdata.integrations.accelerate.skip_first_batches` seeks.
- :mod:`seekdata.integrations.transformers`: a ``Trainer`` that resumes exactly.
- :mod:`seekdata.integrations.lightning`: a callback that keys model-side randomness by step.
- :mod:`seekdata.integrations.hooks`: the one table of what a loader does when a framework asks
  (imports no framework; the loader consults it lazily).
"""

__all__: list[str] = []
