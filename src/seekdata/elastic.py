"""Elastic jobs: the per-rank batch of a global batch on the world size of this (re)start.

torchrun's elastic agent restarts a job on the nodes it has (``--nnodes=MIN:MAX``); every
restart is a resume from the newest checkpoint on the new world size. A loader checkpoint
loads on any world size that keeps the global batch (``docs/elastic.md``), so the one thing a
script decides at each start is its per-rank batch: the global batch ÷ the world size, which
:func:`per_rank_batch_size` computes and checks::

    batch = seekdata.elastic.per_rank_batch_size(GLOBAL_BATCH)  # WORLD_SIZE of this start
    loader = seekdata.StatefulDataLoader(dataset, batch_size=batch, sampler=..., seed=...)
    loader.load_state_dict(ckpt["loader"])  # written on any world size, the same global batch

:mod:`seekdata.tools.demo.elastic_train` is the whole script (``examples/elastic_train.py``
runs it); ``docs/elastic.md`` ("Across nodes with torchrun") the launch lines and the settings
that make torchrun's restarts work.
"""

from __future__ import annotations

import math

from seekdata._core import dist as _dist
from seekdata._core.checks import check_int

__all__ = ["per_rank_batch_size"]


def per_rank_batch_size(global_batch_size: int, world_size: int | None = None) -> int:
    """``global_batch_size`` ÷ ``world_size``: the batch each rank loads so that every world
    size the job runs on consumes the same global batch per step.

    ``world_size`` defaults to the process group's, then ``WORLD_SIZE`` (set by torchrun at
    every restart), else 1. A world size that does not divide the global batch is refused,
    naming the world sizes that do: a rounded batch would change the samples of every later
    step.

    >>> per_rank_batch_size(48, 4)
    12
    """
    where = "per_rank_batch_size"
    total = check_int(global_batch_size, "global_batch_size", where, low=1)
    world = (
        _dist.world_size_or_one()
        if world_size is None
        else check_int(world_size, "world_size", where, low=1)
    )
    if total % world:
        small = [d for d in range(1, math.isqrt(total) + 1) if total % d == 0]
        divisors = sorted({*small, *(total // d for d in small)})
        shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
        raise ValueError(
            f"{where}: the world size must divide the global batch size; got global batch "
            f"{total} on {world} ranks ({total} % {world} = {total % world}); run on a world "
            f"size that divides it ({shown}: with torchrun, every node count of --nnodes=MIN:MAX "
            f"times --nproc-per-node), or choose a global batch that {world} divides"
        )
    return total // world
