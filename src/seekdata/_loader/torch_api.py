"""torch's DataLoader rules that the loader keeps: which arguments it refuses, which
attributes are frozen after construction and which are read again at every ``iter()``.

Written once here so that ``StatefulDataLoader`` behaves as ``torch.utils.data.DataLoader``
for every argument combination, with torch's exception types and wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.utils.data

from seekdata._core.checks import ArgumentError, check_int, is_bool

# torch's DataLoader.__setattr__ refuses these after construction: they define the stream
FROZEN = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
# torch reads these at every iter(), so assigning them takes effect at the next iter(): the
# loader forwards them to its engine
FORWARDED = (
    "num_workers",
    "pin_memory",
    "timeout",
    "prefetch_factor",
    "in_order",
    "pin_memory_device",
    "multiprocessing_context",
    "worker_init_fn",
    "collate_fn",
    "worker_method",
)

#: torch's names for where workers run (``worker_method=``): processes (the default) or threads
WORKER_METHODS = ("multiprocessing", "thread")


def check_worker_method(worker_method: Any, multiprocessing_context: Any, where: str) -> str:
    """``worker_method``: one of :data:`WORKER_METHODS`; threads take no process start method."""
    if not isinstance(worker_method, str):
        raise ArgumentError(
            f"{where}: worker_method must be a str, one of {WORKER_METHODS}; got "
            f"{type(worker_method).__name__} {worker_method!r}; pass worker_method='thread' or "
            f"'multiprocessing'"
        )
    if worker_method not in WORKER_METHODS:
        raise ValueError(
            f"{where}: worker_method must be one of {WORKER_METHODS}; got {worker_method!r}; "
            f"pass worker_method='thread' for threads of this process, or 'multiprocessing' "
            f"(the default) for worker processes"
        )
    if worker_method == "thread" and multiprocessing_context is not None:
        raise ValueError(
            f"{where}: multiprocessing_context chooses how worker processes start, but "
            f"worker_method='thread' starts threads; got multiprocessing_context="
            f"{multiprocessing_context!r}; drop multiprocessing_context, or pass "
            f"worker_method='multiprocessing'"
        )
    return worker_method


def check_torch_args(dataset: Any, args: Mapping[str, Any], where: str) -> int | None:
    """Reject what ``torch.utils.data.DataLoader.__init__`` rejects, in torch's order and with
    its exception types; return ``prefetch_factor`` as torch sets it (2 with workers).
    ``num_workers`` and ``prefetch_factor`` keep the integer rule first (torch compares them
    with ints: a bool or a float would pass)."""
    batch_size, shuffle, drop_last = args["batch_size"], args["shuffle"], args["drop_last"]
    sampler, batch_sampler = args["sampler"], args["batch_sampler"]
    timeout, persistent_workers = args["timeout"], args["persistent_workers"]
    num_workers = check_int(args["num_workers"], "num_workers", where)
    prefetch_factor = args["prefetch_factor"]
    if prefetch_factor is not None:
        prefetch_factor = check_int(prefetch_factor, "prefetch_factor", where)
    if num_workers < 0:
        raise ValueError(
            f"{where}: num_workers option should be non-negative; got {num_workers}; use "
            f"num_workers=0 to disable multiprocessing"
        )
    if timeout < 0:
        raise ValueError(
            f"{where}: timeout option should be non-negative; got {timeout}; pass 0 to wait "
            f"without a limit"
        )
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            f"{where}: prefetch_factor option could only be specified in multiprocessing; got "
            f"prefetch_factor={prefetch_factor} with num_workers=0; pass num_workers > 0, or "
            f"prefetch_factor=None"
        )
    if num_workers > 0 and prefetch_factor is None:
        prefetch_factor = 2
    elif prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError(
            f"{where}: prefetch_factor option should be non-negative; got {prefetch_factor}"
        )
    if persistent_workers and num_workers == 0:
        raise ValueError(
            f"{where}: persistent_workers option needs num_workers > 0; got num_workers=0; "
            f"pass num_workers > 0, or persistent_workers=False"
        )
    if isinstance(dataset, torch.utils.data.IterableDataset):
        pipe = isinstance(dataset, torch.utils.data.IterDataPipe)  # torch applies shuffle to it
        for name, value, unset in (
            ("shuffle", shuffle, shuffle in (False, None) or pipe),
            ("sampler", sampler, sampler is None),
            ("batch_sampler", batch_sampler, batch_sampler is None),
        ):
            if not unset:
                raise ValueError(
                    f"{where}: DataLoader with IterableDataset: expected unspecified {name} "
                    f"option, but got {name}={value!r}; an IterableDataset decides its own "
                    f"order (shuffle inside the dataset)"
                )
    if sampler is not None and shuffle:
        raise ValueError(
            f"{where}: sampler option is mutually exclusive with shuffle; got shuffle={shuffle} "
            f"and a sampler; shuffle in the sampler (seekdata.DistributedSampler(shuffle=True))"
        )
    if batch_sampler is not None and (
        batch_size != 1 or shuffle or sampler is not None or drop_last
    ):
        raise ValueError(
            f"{where}: batch_sampler option is mutually exclusive with batch_size, shuffle, "
            f"sampler and drop_last; got batch_size={batch_size}, shuffle={shuffle}, "
            f"sampler={type(sampler).__name__}, drop_last={drop_last}; pass only batch_sampler"
        )
    if batch_sampler is None and batch_size is None and drop_last:
        raise ValueError(
            f"{where}: batch_size=None option disables auto-batching and is mutually exclusive "
            f"with drop_last; pass drop_last=False, or a batch_size"
        )
    if batch_sampler is None and batch_size is not None and not is_bool(drop_last):
        raise ArgumentError(  # torch's BatchSampler raises ValueError here: so does this
            f"{where}: drop_last should be a boolean value; got {drop_last!r}"
        )
    return prefetch_factor
