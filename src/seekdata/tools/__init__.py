"""The ``seekdata`` command and its tools, apart from the library they exercise.

- :mod:`seekdata.tools.cli`: the ``seekdata`` console script, one subcommand per tool;
- :mod:`seekdata.tools.inspection`: ``seekdata inspect``, a checkpoint's seekdata states;
- :mod:`seekdata.tools.verify`: ``seekdata verify``, a resume check in fresh processes;
- :mod:`seekdata.tools.bench`: ``seekdata bench``, the benchmark harness (``benchmarks/``);
- :mod:`seekdata.tools.demo`: ``python -m seekdata.demo``, the preempted DDP job and the
  elastic one (``--elastic``), with their one torchrun supervisor.

The core (``seekdata.rng``, ``order``, ``sampler``, ``loader``, ...) never imports this package.
"""

__all__: list[str] = []
