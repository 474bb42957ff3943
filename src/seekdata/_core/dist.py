"""The one place that asks torch.distributed or the environment for rank and world size.

Order of precedence (CONTRIBUTING.md, "No ambient defaults"): explicit arguments, then an
initialised process group, then the ``RANK`` / ``WORLD_SIZE`` environment variables, else a single
process. When ``WORLD_SIZE > 1`` but no rank can be found, that is an error, never a silent rank 0.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from seekdata._core.checks import check_int


def _env_int(name: str, where: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"{where}: environment variable {name} must be an int; got {raw!r}; "
            f"unset it or set it to an integer"
        ) from None


def pg_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def world(num_replicas: Any = None, rank: Any = None, *, where: str) -> tuple[int, int]:
    """Resolve ``(world_size, rank)``; validate both."""
    if num_replicas is not None:
        num_replicas = check_int(num_replicas, "num_replicas", where)
    if rank is not None:
        rank = check_int(rank, "rank", where)
    if num_replicas is None:
        if pg_initialized():
            num_replicas = dist.get_world_size()
        else:
            num_replicas = _env_int("WORLD_SIZE", where) or 1
    if num_replicas < 1:
        raise ValueError(
            f"{where}: num_replicas must be >= 1; got {num_replicas}; "
            f"pass the number of ranks (torch.distributed.get_world_size())"
        )
    if rank is None:
        rank = dist.get_rank() if pg_initialized() else _env_int("RANK", where)
        if rank is None:
            if num_replicas > 1:
                raise ValueError(
                    f"{where}: rank is unknown while the world size is {num_replicas}; "
                    f"no process group is initialised and RANK is not set; pass rank=..., "
                    f"or call torch.distributed.init_process_group first"
                )
            rank = 0
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"{where}: rank must be in [0, {num_replicas - 1}] for num_replicas={num_replicas}; "
            f"got rank={rank}; pass a rank below the world size"
        )
    return num_replicas, rank


def rank_or_zero() -> int:
    """Rank from the process group, then ``RANK``, else 0 (for per-rank RNG keys)."""
    if pg_initialized():
        return dist.get_rank()
    return _env_int("RANK", "rank") or 0


def world_size_or_one() -> int:
    """World size from the process group, then ``WORLD_SIZE``, else 1 (informational use)."""
    if pg_initialized():
        return dist.get_world_size()
    return _env_int("WORLD_SIZE", "world size") or 1


def local_rank() -> int | None:
    """``LOCAL_RANK`` (set by torchrun), or None."""
    return _env_int("LOCAL_RANK", "local rank")


def agree_with_rank0(value: int) -> int:
    """``value`` on rank 0 of an initialised process group, on every rank; else ``value``.

    A collective (every rank must call it): for defaults that derive from per-process state,
    such as a seed from ``torch.initial_seed()``, which differs between unseeded ranks.
    """
    if not pg_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)  # uses the backend's device (CUDA for NCCL)
    return int(box[0])


def collective_device(device: str | torch.device | None) -> torch.device:
    """Where a small collective's tensor must live: CUDA for NCCL, CPU for gloo/mpi."""
    if device is not None:
        return torch.device(device)
    if dist.get_backend() == "nccl":  # mixed "cpu:gloo,cuda:nccl" takes CPU tensors
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_rank(flag: bool, device: str | torch.device | None = None) -> bool:
    """True on every rank when ``flag`` is true on any rank (an all_reduce MAX; a barrier)."""
    t = torch.tensor([int(flag)], dtype=torch.int32, device=collective_device(device))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def exit_finished_rank(code: int = 0) -> NoReturn:
    """End a rank that has finished (its process group destroyed) without interpreter
    finalization, where torch's gloo threads can abort the process ("terminate called without
    an active exception", SIGABRT) and a launcher would report a failed rank. Flushes first."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
