"""The one place that asks torch.distributed or the environment for rank and world size, and
the one that ends a rank (:func:`exit_ddp`).

Order of precedence (CONTRIBUTING.md, "No ambient defaults"): explicit arguments, then an
initialised process group, then the ``RANK`` / ``WORLD_SIZE`` environment variables, else a single
process. When ``WORLD_SIZE > 1`` but no rank can be found, that is an error, never a silent rank 0.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from seekdata._core.checks import check_int, is_int


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


# --- the end of a rank ---------------------------------------------------------------------
# Ending a DDP rank as an ordinary exit would, without the interpreter's finalization.
#
# torch 2.13's gloo backend can abort a finished rank at interpreter shutdown: a gloo worker
# thread (``pt_gloo_runloop``) holds the last reference to the autograd context torch keeps in
# thread-local state, and asks for the GIL after the main thread began finalizing; CPython ends
# the thread with ``pthread_exit`` inside a ``noexcept`` destructor, and the process dies with
# "terminate called without an active exception" (SIGABRT), after the script's last line
# (pytorch/pytorch#190489). A launcher then reports a failed rank.
#
# exit_ddp does what an ordinary exit does that a script can see — it destroys the
# process group, waits for the script's non-daemon threads, runs the ``atexit`` handlers (the
# script's own, ``logging``'s, ``multiprocessing``'s that stop DataLoader workers, and seekdata's
# exit flag that those workers read), flushes stdout and stderr — and then ends the process with
# ``os._exit``, skipping the finalization in which the abort happens.
#
# No cheaper step before finalization is reliable: a ``gc.collect()`` or a 0.5 s pause after
# ``destroy_process_group()`` made the abort rarer on one machine, by giving the gloo thread
# time to let go first; that is a race won, not removed. ``benchmarks/ddp_exit.py`` counts the
# aborts with and without exit_ddp.


def exit_ddp(code: Any = 0) -> NoReturn:
    """End this rank of a DDP job with exit status ``code``, avoiding torch's abort at
    interpreter shutdown ("terminate called without an active exception", SIGABRT).

    Call it as the script's last line, on every rank. It destroys the process group if one
    is initialized, waits for non-daemon threads, runs the ``atexit`` handlers (yours and
    logging's included), flushes stdout and stderr, then calls ``os._exit(code)``: what the
    interpreter would do at exit, less the finalization in which gloo's threads abort it.
    Without a process group it ends the process just the same.
    """
    if not is_int(code):
        raise TypeError(
            f"exit_ddp: code must be an int exit status; got {type(code).__name__} {code!r}; "
            f"pass 0 for success"
        )
    if not 0 <= code <= 255:
        raise ValueError(
            f"exit_ddp: code must be an exit status in [0, 255]; got {code}; pass 0 for "
            f"success, 1 for a failure"
        )
    try:
        # each step runs even when the one before raised (or a Ctrl-C landed), as at exit
        for step in (_destroy_process_group, _join_threads, atexit._run_exitfuncs):
            try:
                step()
            except BaseException:
                traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a closed or broken stream: nothing left to say
                pass
        os._exit(int(code))


def _join_threads() -> None:
    if threading.current_thread() is threading.main_thread():
        # What the interpreter calls first at exit: threading's own exit hooks (those of
        # concurrent.futures' executors), then a join of every non-daemon thread. No public
        # function does both.
        threading._shutdown()  # type: ignore[attr-defined]


def _destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
