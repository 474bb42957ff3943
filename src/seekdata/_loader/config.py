"""A loader's configuration: the one list of its arguments, each checked once.

:data:`ARGUMENTS` lists every argument of :class:`seekdata.StatefulDataLoader` after
``dataset``, in the signature's order, once: its name, default, one-line doc, and the check
that turns what the user passed into the value the loader uses. Everything else follows from
it: :meth:`LoaderConfig.from_args` runs torch's joint rules first (in torch's order, with its
exception types), then each argument's check in the list's order, then seekdata's joint rules;
the config's arguments are ``config.<name>``; the loader's torch-style attributes are copied
from the config by the list (``Argument.attribute``). ``StatefulDataLoader.__init__`` keeps an
explicit signature for users and IDEs, and a test checks that it is this list, in order: a new
argument is one entry here, one parameter there, and its uses.

Derived values sit beside the arguments: :class:`TorchOptions` (torch's options every engine
passes on, typed), :class:`Keys` (the seed and the reseed choice: one object that the loader,
the config and the engine share, so a checkpoint's seed reaches all of them at once),
``lookahead`` (``device=`` / ``device_prefetch=``), ``owns_sampler`` and ``assign_rank`` (a
framework rebuilt the loader for another rank).

What may change after construction is on the engine: the seed a checkpoint brings
(``seed=None``, through :class:`Keys`), ``step_rng``, ``device``/``device_prefetch`` and torch's
attributes read at every ``iter()`` (``num_workers``, ...), which the loader's ``__setattr__``
forwards.
"""

from __future__ import annotations

import dataclasses
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch.utils.data

from seekdata._core import globalrng as _globalrng
from seekdata._core.checks import check_bool, check_counter, check_int
from seekdata._loader import device as _device
from seekdata._loader.rebuild import RankRequest
from seekdata._loader.seed import default_seed
from seekdata._loader.torch_api import check_torch_args, check_worker_method

__all__ = ["ARGUMENTS", "RECHECKED", "Argument", "Keys", "LoaderConfig", "TorchOptions"]

Check = Callable[[Any, str], Any]


def _keep(value: Any, where: str) -> Any:
    return value


def _flag(name: str) -> Check:
    return lambda value, where: check_bool(value, name, where)


def _optional_int(name: str, low: int) -> Check:
    return lambda value, where: None if value is None else check_int(value, name, where, low)


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument of ``StatefulDataLoader``: the one place it is defined."""

    name: str
    default: Any
    doc: str
    check: Check = _keep  # (value, where) -> the value the loader uses; after torch's rules
    keyword_only: bool = False
    attribute: bool = True  # the loader shows it as an attribute, as torch's DataLoader does


# StatefulDataLoader(dataset, <these, in this order>): torch's first, then torchdata's, then ours
ARGUMENTS: tuple[Argument, ...] = (
    Argument(
        "batch_size", 1, "samples per batch; None: one sample per step, not collated",
        _optional_int("batch_size", 1),
    ),
    Argument("shuffle", None, "the loader's own sampler shuffles (torch's)", attribute=False),
    Argument("sampler", None, "a sampler of one's own (a seekdata one seeks)", attribute=False),
    Argument("batch_sampler", None, "batches of indices of one's own (replayed)", attribute=False),
    Argument(
        "num_workers", 0, "worker processes (or threads) fetching batches",
        lambda value, where: check_int(value, "num_workers", where, 0),
    ),
    Argument("collate_fn", None, "samples -> batch; None: torch's default"),
    Argument("pin_memory", False, "batches in pinned memory (torch's: any truth value)"),
    Argument("drop_last", False, "drop the last incomplete batch", _flag("drop_last")),
    Argument("timeout", 0, "seconds to wait for a worker's batch; 0: no limit"),
    Argument("worker_init_fn", None, "called in each worker with its id"),
    Argument("multiprocessing_context", None, "how worker processes start"),
    Argument("generator", None, "seed=None: the seed derives from it; then ignored"),
    Argument(
        "prefetch_factor", None, "batches ahead per worker; None: 2 with workers",
        _optional_int("prefetch_factor", 0), keyword_only=True,
    ),
    Argument("persistent_workers", False, "workers outlive an epoch", keyword_only=True),
    Argument("pin_memory_device", "", "torch's (deprecated by torch)", keyword_only=True),
    Argument("in_order", True, "batches in order", _flag("in_order"), keyword_only=True),
    Argument(
        "seed", None, "keys every random decision; None: torch's seed, then the checkpoint's",
        keyword_only=True, attribute=False,  # the loader's seed is the shared Keys' (a property)
    ),
    Argument(
        "reseed_global_rng", True, "global generators seeded per sample (or their names)",
        keyword_only=True,
    ),
    Argument("batch_transform", None, "(batch, rng) -> batch after collation", keyword_only=True),
    Argument(
        "snapshot_every_n_steps", 1, "torchdata's; accepted (a cursor is exact at every step)",
        _optional_int("snapshot_every_n_steps", 0), keyword_only=True,
    ),
    Argument(
        "step_rng", True, "seed the caller's global RNG per batch handed out",
        _flag("step_rng"), keyword_only=True,
    ),
    Argument(
        "batched_fetch", True, "a dataset's __getitems__ reads a batch in one call",
        _flag("batched_fetch"), keyword_only=True,
    ),
    Argument("device", None, "batches arrive on this device, copied ahead", keyword_only=True),
    Argument(
        "device_prefetch", 1, "batches moved ahead of the step (>= 1)",
        _device.check_depth, keyword_only=True,
    ),
    Argument(
        "grown", None, "how an append-only dataset grew (seekdata.Growth list)",
        keyword_only=True, attribute=False,
    ),
    Argument(
        "worker_method", "multiprocessing", "workers are processes, or threads ('thread')",
        keyword_only=True,
    ),
)  # fmt: skip

NAMES = tuple(a.name for a in ARGUMENTS)
#: the arguments whose attribute may be assigned later and is checked again, by the same check
RECHECKED = {
    a.name: a
    for a in ARGUMENTS
    if a.name in ("num_workers", "prefetch_factor", "step_rng", "device_prefetch")
}


@dataclasses.dataclass(frozen=True)
class TorchOptions:
    """torch's ``DataLoader`` options every engine passes on unchanged (typed, checked)."""

    num_workers: int
    pin_memory: bool  # also on with device= on CUDA: the copy ahead is then asynchronous
    timeout: float
    multiprocessing_context: Any
    prefetch_factor: int | None  # torch's: 2 with workers when not given
    persistent_workers: bool
    pin_memory_device: str
    in_order: bool

    def kwargs(self) -> dict[str, Any]:
        """As keyword arguments of torch's (or torchdata's) ``DataLoader``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass
class Keys:
    """The seed and the reseed choice: one object, shared by reference by the loader, its
    config and its engine, so a seed a checkpoint brings (``seed=None``) is everyone's at once.
    Only the engine's ``adopt_seed`` changes ``seed``."""

    seed: int
    explicit: bool  # seed= was given (else the checkpoint's seed wins at load)
    reseed: tuple[str, ...]  # the global generators seeded per sample
    reseed_global_rng: bool | tuple[str, ...]  # as the user says it (loader.reseed_global_rng)


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """The checked arguments of one :class:`seekdata.StatefulDataLoader` (``config.<name>``,
    one per :data:`ARGUMENTS` entry) and what derives from them."""

    arguments: Mapping[str, Any]  # name -> checked value, in ARGUMENTS' order
    keys: Keys
    torch: TorchOptions
    lookahead: _device.DevicePrefetch | None  # device= / device_prefetch=
    owns_sampler: bool  # the loader builds its own DistributedSampler (shuffle=, no sampler)
    assign_rank: RankRequest | None  # a framework rebuilt the loader: the rank to take

    def __getattr__(self, name: str) -> Any:  # an argument: config.batch_size, ...
        arguments = self.__dict__.get("arguments", {})
        if name in arguments:
            return arguments[name]
        raise AttributeError(f"LoaderConfig has no argument or field {name!r}")

    @property
    def seed(self) -> int:
        """The seed now: the argument's, or the one a checkpoint brought (:class:`Keys`)."""
        return self.keys.seed

    @property
    def reseed_global_rng(self) -> bool | tuple[str, ...]:
        return self.keys.reseed_global_rng

    @property
    def per_sample(self) -> bool:
        """``batch_size=None`` without a batch sampler: one sample per step, not collated."""
        return self.batch_size is None and self.batch_sampler is None

    @classmethod
    def from_args(
        cls, dataset: Any, given: Mapping[str, Any], where: str, stacklevel: int = 2
    ) -> LoaderConfig:
        """Check every argument of ``given`` (one per :data:`ARGUMENTS` entry) once: torch's
        rules first, in torch's order, then each argument's check, then seekdata's joint rules.
        ``stacklevel`` points the ``generator=`` warning at the user's line."""
        args = {name: given[name] for name in NAMES}  # a missing one is a KeyError: our bug
        # a batch sampler a framework rebuilt around our sampler carries its rank request
        request = getattr(args["batch_sampler"], "assign_rank", None)
        if not isinstance(request, RankRequest):
            request = None
        else:  # rebuilt around our own sampler: the original loader's stream on another rank
            args.update(sampler=request.sampler, batch_sampler=None, shuffle=None)
            args.update(batch_size=request.batch_size, drop_last=request.drop_last)
        args["prefetch_factor"] = check_torch_args(dataset, args, where)
        args["worker_method"] = check_worker_method(
            args["worker_method"], args["multiprocessing_context"], where
        )
        if args["batch_sampler"] is not None:  # torch's rule: the batch sampler decides both
            args.update(batch_size=None, drop_last=False)
        for argument in ARGUMENTS:
            args[argument.name] = argument.check(args[argument.name], where)
        keys = _keys(args, request, where, stacklevel + 1)
        args["seed"], args["generator"] = keys.seed, None  # used: it decided the seed
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if (
            iterable
            and args["worker_method"] == "thread"
            and isinstance(dataset, torch.utils.data.IterDataPipe)
        ):
            raise ValueError(
                f"{where}: worker_method='thread' runs an IterableDataset in threads that share "
                f"one process, but a DataPipe is reseeded per worker process by torch "
                f"(apply_random_seed); got {type(dataset).__name__}; pass "
                f"worker_method='multiprocessing' (docs/threads.md)"
            )
        _check_batch_transform(args, iterable, where)
        lookahead = _device.prefetch_option(args["device"], args["device_prefetch"], where)
        args["device"] = None if lookahead is None else lookahead.device
        sampler, batch_sampler = args["sampler"], args["batch_sampler"]
        owns_sampler = (sampler is None and batch_sampler is None) or (
            request is not None and request.owns_sampler
        )
        if args["grown"] is not None and not (owns_sampler and sampler is None):
            raise ValueError(
                f"{where}: grown= declares the growths of the loader's own sampler; got it with "
                f"{'a sampler' if sampler is not None else 'a batch_sampler or IterableDataset'}"
                f"; pass grown= to seekdata.DistributedSampler(dataset, ..., grown=...) instead"
            )
        options = {f.name: args[f.name] for f in dataclasses.fields(TorchOptions)}
        # device= on CUDA: the engine pins (in torch's pin thread with workers)
        options["pin_memory"] = args["pin_memory"] or (lookahead is not None and lookahead.pins)
        return cls(
            arguments=types.MappingProxyType(args),
            keys=keys,
            torch=TorchOptions(**options),
            lookahead=lookahead,
            owns_sampler=owns_sampler,
            assign_rank=request,
        )


def _keys(args: dict[str, Any], request: RankRequest | None, where: str, stacklevel: int) -> Keys:
    """``seed=`` (else torch's seed, or a rebuilt loader's) and ``reseed_global_rng=``."""
    seed, generator = args["seed"], args["generator"]
    explicit = seed is not None  # else the checkpoint's seed wins at load
    if request is not None:  # as the loader it rebuilds: its seed, chosen or not
        seed, explicit = request.seed, request.seed_explicit
    if seed is None:
        seed = default_seed(generator, where)
    else:
        seed = check_counter(seed, "seed", where)
        if generator is not None:
            warnings.warn(
                f"{where}: generator= is ignored: order and worker seeds derive from seed="
                f"{seed}; pass seed= to change the stream",
                stacklevel=stacklevel + 1,
            )
    given = args["reseed_global_rng"]
    reseed = _globalrng.reseed_set(given, where)  # bool or generator names
    as_given = bool(given) if isinstance(given, bool | np.bool_) else reseed
    return Keys(seed, explicit, reseed, as_given)


def _check_batch_transform(args: Mapping[str, Any], iterable: bool, where: str) -> None:
    """``batch_transform`` works on every path that makes batches, and is refused elsewhere."""
    batch_transform = args["batch_transform"]
    if batch_transform is None:
        return
    if not callable(batch_transform):
        raise TypeError(
            f"{where}: batch_transform must be a callable (batch, rng) -> batch; got "
            f"{type(batch_transform).__name__}; pass e.g. seekdata.transforms.MixUp(0.2)"
        )
    if iterable:
        raise ValueError(
            f"{where}: batch_transform needs a map-style dataset (its randomness is keyed by "
            f"the batch's indices, which an IterableDataset does not have); got an "
            f"IterableDataset; apply the transform in the dataset or in the training loop"
        )
    if args["batch_size"] is None and args["batch_sampler"] is None:
        raise ValueError(
            f"{where}: batch_transform applies to batches, but batch_size=None loads single "
            f"samples without collating them; pass batch_size=, or transform each sample in "
            f"the dataset"
        )
