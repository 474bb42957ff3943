"""Seekable weighted mixtures: which source, and which of its samples, sits at a position.

A :class:`Mixture` of K map-style sources is itself a map-style dataset. Position ``p`` of
mixture epoch ``e`` is position ``P = e * len(mixture) + p`` of one endless stream; all about
``P`` is a pure function of counters, in O(log K) time from O(K) tables:

1. **Which source.** The weights are exact rationals ``a_k / A``. A weight-balanced binary tree
   over the sources splits the stream: a node that received ``m`` positions sent
   ``round(m * a_left / a_node)`` of them left. Walking it with integers gives the source of
   ``P`` *and* its own stream position ``q``, for any ``P`` (1e12 included), with no table and
   no replay. With a ``schedule``, the tree of the segment that holds ``P`` routes
   ``P - start`` and each source continues from its count at the segment's start
   (:mod:`seekdata.sources.mixtures.schedule`).
2. **Which sample.** Source k walks its own epochs: ``source_epoch = q // n_k``, the sample is
   ``order_k(source_epoch, q % n_k)``, a seekable order keyed by the source's seed. A source
   that grew (:meth:`Mixture.changed` with ``grown=``) walks epochs whose length changes where
   it grew (:mod:`seekdata.sources.mixtures.growth`).
3. **Its randomness.** The sample is fetched under the key (source seed, source epoch, index),
   the source seed hashed from (seed, source id): the same numbers whatever else is mixed in.

The bound: over every prefix of the stream (of each segment), each source's count stays within
:attr:`Mixture.bound` of ``weight * p`` (below 2 for any weights; docs/mixtures.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import torch.utils.data

from seekdata._core import globalrng as _globalrng
from seekdata._core import sample as _sample
from seekdata._core import source as _source
from seekdata._core import streams as _streams
from seekdata._core.checks import ArgumentError, check_bool, check_counter, is_int
from seekdata._core.growth import signature_then
from seekdata._core.orders import Feistel, Order, feistel_index, make_order
from seekdata._core.rngkeys import sample_seeds
from seekdata.sources.mixtures import changes as _changes
from seekdata.sources.mixtures import records as _records
from seekdata.sources.mixtures.growth import SourceLengths, grown_sources
from seekdata.sources.mixtures.schedule import (
    Schedule,
    Segment,
    check_length,
    integer_weights,
    parse_schedule,
    parse_weights,
    source_length,
)

__all__ = ["Mixture"]

_MIX_TAG = 0x4D495854  # "MIXT": per-source seeds are derive_key(seed, _MIX_TAG, source id)
_WINDOW_TAG = 0x57494E44  # "WIND": the window shuffle's seed is derive_key(seed, _MIX_TAG, this)


class Mixture(torch.utils.data.Dataset):
    """K map-style datasets interleaved by weight, seekable in O(log K) at any position.

    Args:
        datasets: the sources: map-style datasets (``__len__`` and ``__getitem__``), e.g.
            :class:`seekdata.wds.TarShards`, any mix; a list, or a dict ``{name: dataset}``
            to name them (:attr:`names`; weights may then be given by name).
        weights: one positive weight per source (int, float or Fraction; floats are read as
            their shortest decimal, so 0.3 is exactly 3/10), as a list or a dict by name or
            index. Only the ratios matter. Give either ``weights`` or ``schedule``.
        schedule: weights that change along the stream, known in advance:
            ``[(0, w_0), (P_1, w_1), ...]`` with starts in stream positions
            ``P = epoch * len(mixture) + p``, strictly increasing from 0. Each ``w_j`` is a
            list or a dict by name or index (a source it leaves out, or gives 0, receives
            nothing in that segment). At each start every source continues from what it has
            delivered: nothing of a source repeats within its source epoch, nothing is skipped.
        length: samples per mixture epoch (``len(mixture)``); default: the sources' total.
        seed: keys the sources' orders and their samples' randomness.
        order: each source's order: ``"feistel"`` (default), ``"shards"`` (shard-local for
            sources with ``shard_sizes``, Feistel for the others) or ``"sequential"``.
        source_ids: the ids that key each source's seed; default ``0 .. K-1``. Give a source
            the same id in two mixtures and its samples get the same randomness in both.
        reseed_global_rng: reseed torch/numpy/``random`` global RNG from the sample's key
            around each fetch, as :class:`seekdata.StatefulDataLoader` does; give both the
            same value (a loader that does not reseed does not restore the caller's RNG).
        window: shuffle the stream within consecutive windows of this many positions (0:
            off). Breaks the fixed source pattern (see docs/mixtures.md: DDP ranks) at the cost
            of a looser :attr:`bound` inside a window.

    The mixture shuffles itself: iterate it in sequential order (``StatefulDataLoader``'s
    default, or ``DistributedSampler(mixture, shuffle=False)``); ``shuffle=True`` raises.
    Inside a seekdata loader the mixture epoch is the loader's; elsewhere, :meth:`set_epoch`.
    To change weights or sources when a run resumes, :meth:`changed`.
    """

    #: Read by :class:`seekdata.DistributedSampler`: shuffling positions again is refused.
    shuffles_itself = True
    #: Read by the loader: a mixture does not grow by ``load_state_dict(state, grow=True)``
    #: (its positions would route to other sources); a source that grew is a change of it.
    append_stable = False
    grow_instead = (
        "a source of a mixture that grew is declared on the mixture: resume into "
        "mix.changed(state, weights, grown={name: grown_source}) (docs/mixtures.md), loaded "
        "without grow=True"
    )

    @property
    def stream_signature(self) -> str:
        """What decides the stream, for a loader's state: the sources' lengths and ids, the
        exact weights (the whole schedule, if there is one), seed, order, window and length
        (hashed: K = 1,000 weights are long). A state saved over another mixture is refused at
        ``load_state_dict``. Without a schedule it is what it was before schedules existed."""
        if "signature" in self._memo:  # K = 1,000 big weights a segment: hashed once
            return str(self._memo["signature"])
        weights: Any = self._schedule.spec() if self._scheduled else self._a
        grew = (tuple(self._growths),) if self._growths else ()  # (source, at, n0, n1) each
        spec = repr((self.sizes, self.source_ids, weights, self.seed, self.order, self.window,
                     self.length, self.reseed_global_rng, *grew))  # fmt: skip
        digest = hashlib.sha256(spec.encode()).hexdigest()[:16]
        self._memo["signature"] = (
            f"Mixture(K={len(self.datasets)}, length={self.length}, seed={self.seed}, {digest})"
        )
        return str(self._memo["signature"])

    @property
    def reseeds_global_rng_itself(self) -> bool:
        """Read by the loader: with ``reseed_global_rng=True`` every fetch reseeds torch, numpy
        and ``random`` from the sample's own key, so the loader skips its own reseeding by
        position (it would be overwritten before the source runs). Not for a subclass that
        overrides ``__getitem__``: its own code may draw before the mixture reseeds."""
        return self.reseed_global_rng and type(self).__getitem__ is Mixture.__getitem__

    def __init__(
        self,
        datasets: Sequence[Any] | Mapping[str, Any],
        weights: Sequence[Any] | Mapping[Any, Any] | None = None,
        *,
        schedule: Sequence[tuple[int, Any]] | None = None,
        length: int | None = None,
        seed: int = 0,
        order: str = "feistel",
        source_ids: Sequence[int] | None = None,
        reseed_global_rng: bool = True,
        window: int = 0,
    ) -> None:
        where = "Mixture"
        self.names: tuple[str, ...] | None = None
        if isinstance(datasets, Mapping):
            if not all(isinstance(name, str) for name in datasets):
                raise TypeError(
                    f"{where}: a dict of datasets is keyed by source name (str); got keys "
                    f"{list(datasets)!r}; pass e.g. {{'web': web, 'code': code}}"
                )
            self.names = tuple(datasets)
            datasets = list(datasets.values())
        if not isinstance(datasets, Sequence) or isinstance(datasets, str | bytes):
            raise TypeError(
                f"{where}: datasets must be a list of map-style datasets; got "
                f"{type(datasets).__name__}; pass e.g. [web, code]"
            )
        if (weights is None) == (schedule is None):
            raise TypeError(
                f"{where}: pass exactly one of weights= and schedule=; got "
                f"{'both' if schedule is not None else 'neither'}; a schedule's first entry "
                f"(0, weights) holds the weights from the start"
            )
        if len(datasets) == 0:
            raise ValueError(
                f"{where}: one weight per dataset and at least one dataset; got 0 datasets"
            )
        self.seed = check_counter(seed, "seed", where)
        self.reseed_global_rng = check_bool(
            reseed_global_rng, "reseed_global_rng", where,
            fix="pass the loader's value (True by default)",
        )  # fmt: skip
        if order not in ("feistel", "shards", "sequential"):
            raise ValueError(
                f"{where}: order must be 'feistel', 'shards' or 'sequential'; got {order!r}; "
                f"use 'shards' to keep tar shards' shard-local order"
            )
        self.datasets = list(datasets)
        self.sizes = [source_length(d, k) for k, d in enumerate(self.datasets)]
        ids = list(range(len(datasets))) if source_ids is None else list(source_ids)
        if len(ids) != len(datasets) or len(set(ids)) != len(ids):
            raise ValueError(
                f"{where}: source_ids must be {len(datasets)} distinct ints, one per dataset; "
                f"got {source_ids!r}; pass e.g. source_ids=[0, 1] or leave it unset"
            )
        self.source_ids = [check_counter(i, "source id", where) for i in ids]
        self.window = check_counter(window, "window", where)
        k = len(self.datasets)
        if weights is not None:
            fracs = parse_weights(weights, k, self.names, "weights", zero=False)
            segments = [(0, integer_weights(fracs))]
        else:
            segments = parse_schedule(schedule, k, self.names, self.window)
        self._schedule = Schedule(segments)
        self._scheduled = schedule is not None and len(segments) > 1
        # the first (without a schedule, the only) segment's integer weights and tree
        self._a, self._tree = self._schedule.segments[0].a, self._schedule.segments[0].tree
        self.length = sum(self.sizes) if length is None else check_length(length, where)
        self.order = order
        self.source_seeds = [
            _streams.derive_key(self.seed, _MIX_TAG, i, words=1)[0] for i in self.source_ids
        ]
        self._orders = [self._make_order(k) for k in range(len(self.datasets))]
        self._window_seed = _streams.derive_key(self.seed, _MIX_TAG, _WINDOW_TAG, words=1)[0]
        self.epoch = 0
        self._growths: list[tuple[int, int, int, int]] = []  # (source, at, n0, n1): changed()
        self._lengths: dict[int, SourceLengths] = {}  # the sources that grew: their epochs
        self._memo: dict[Any, Any] = {}  # prefix signatures and history records, made once

    @property
    def growths(self) -> tuple[tuple[int, int, int, int], ...]:
        """The sources that grew (:meth:`changed` with ``grown=``): ``(source, at, n0, n1)``,
        source ``source`` had ``n0`` items before stream position ``at`` and ``n1`` from it,
        in the order of ``at``."""
        return tuple(self._growths)

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The schedule's segments as the mixture routes them: each one's start and integer
        weights (0: absent) with its tree (:attr:`schedule` gives the normalised weights)."""
        return tuple(self._schedule.segments)

    def _grow(self, growths: list[tuple[int, int, int, int]]) -> None:
        """Install the growths ``(source, at, n0, n1)`` (by :meth:`changed`)."""
        self._growths = sorted(growths, key=lambda g: (g[1], g[0]))
        self._memo.clear()
        self._lengths = grown_sources(self._growths, self.order, self.datasets,
                                      self.source_seeds, self._schedule.counts)  # fmt: skip

    # --- changes decided at resume ----------------------------------------------------------------

    def changed(
        self,
        at: int | Mapping[str, Any],
        weights: Sequence[Any] | Mapping[Any, Any],
        *,
        add: Mapping[str, Any] | Sequence[Any] | None = None,
        remove: Sequence[Any] = (),
        grown: Mapping[Any, Any] | None = None,
        length: int | None = None,
    ) -> Mixture:
        """This mixture until stream position ``at``, changed from there on (a new mixture;
        this one is untouched). Resume a checkpoint saved with this mixture into the result:
        every source present in both continues exactly where it was.

        Args:
            at: the change's stream position (``epoch * len(mix) + p``; a multiple of the
                window), or the loader/sampler state to resume: its position, rounded up to
                the window. Write the position into your config (``result.schedule[-1][0]``):
                rebuilding ``mix.changed(that_int, ...)`` makes any checkpoint, earlier or
                later, resume into the same stream.
            weights: the weights from ``at`` on over the new source list (a list, or a dict
                by name or index: a source left out gets 0).
            add: new sources, appended (``{name: dataset}``; a list for unnamed sources):
                weight 0 before ``at``, so they start at their beginning; new ids
                ``max(source_ids) + 1, ...``.
            remove: sources that get weight 0 from ``at`` on (they keep their slot; their
                counts freeze). Pass :meth:`gone` as the dataset of a source that must no
                longer be read.
            grown: ``{name: dataset}``: a source that grew, append-only (its first items
                unchanged). The new items join its current source epoch at once.
            length: not supported (a new mixture epoch length): leave unset.
        """
        change = _changes.changed(self, at, weights, add, remove, grown, length)
        out = type(self)(
            change.sources, schedule=change.schedule, length=self.length, seed=self.seed,
            order=self.order, source_ids=change.source_ids,
            reseed_global_rng=self.reseed_global_rng, window=self.window,
        )  # fmt: skip
        out._grow(change.growths)
        return out

    @staticmethod
    def gone(length: int) -> Any:
        """A placeholder for a removed source that must not be read: ``length`` items (the
        source's length), enough to route and to sign; fetching one raises."""
        return _changes.Gone(length)

    def prefix_signature(self, position: int) -> str:
        """The signature of the stream before stream position ``position`` (rounded up to
        the window): a loader accepts a state saved at ``position`` from any mixture whose
        prefix signature there is the same (it agrees on everything consumed)."""
        stream = check_counter(position, "position", "Mixture.prefix_signature")
        return _changes.prefix_signature(self, stream)

    def source_signatures(self) -> list[list[Any]]:
        """Read by the loader: ``[source id, length, stream_signature]`` of each source that
        defines its own stream (a token corpus, tar shards), so a state saved over this mixture
        refuses the same source rebuilt on other data (token files in another order)."""
        if "sources" not in self._memo:
            out = []
            for k, ds in enumerate(self.datasets):
                signature = None if isinstance(ds, _changes.Gone) else signature_then(ds, None)
                if signature is not None:
                    out.append([self.source_ids[k], self.sizes[k], signature])
            self._memo["sources"] = out
        return [list(entry) for entry in self._memo["sources"]]

    def source_with_id(self, source_id: int) -> tuple[str, Any] | None:
        """``(label, dataset)`` of the source with id ``source_id``; None when it has none or
        it was removed (``Mixture.gone``: never read again)."""
        if source_id not in self.source_ids:
            return None
        k = self.source_ids.index(source_id)
        if isinstance(self.datasets[k], _changes.Gone):
            return None
        return (repr(self.names[k]) if self.names is not None else str(k)), self.datasets[k]

    def stream_records(self, epoch: int, position: int, always: bool = False) -> dict[str, Any]:
        """Read by the loader (:class:`seekdata.sources.SeekableSource`): the records this
        mixture keeps at its cursor, its changes (``prefix``, ``history``: with changes, or
        ``always``; :mod:`seekdata.sources.mixtures.records`), which the state holds under
        ``state["source"]``."""
        return _changes.records(self, epoch, position, always)

    def check_records(self, state: Mapping[str, Any], where: str, strict: bool) -> None:
        """Read by the loader at ``load_state_dict`` (:class:`seekdata.sources.SeekableSource`):
        a state saved over this mixture, or over one that agrees on the stream consumed
        (:func:`seekdata.sources.mixtures.records.check_records`)."""
        _records.check_records(self, state, where, strict)

    def _make_order(self, k: int) -> Order:
        n, seed, ds = self.sizes[k], self.source_seeds[k], self.datasets[k]
        if self.order == "shards" and _source.shard_sizes(ds) is None:
            return Feistel(n, seed)
        return make_order(self.order, n, seed, dataset=ds)

    # --- the pure maps --------------------------------------------------------------------------

    @property
    def weights(self) -> tuple[Fraction, ...]:
        """The normalised weights, exact: each source's share of the stream (with a schedule,
        of its first segment; :attr:`schedule` has them all)."""
        return self.schedule[0][1]

    @property
    def schedule(self) -> tuple[tuple[int, tuple[Fraction, ...]], ...]:
        """``((start, weights), ...)``: each segment's first stream position and normalised
        weights, exact (0 for a source absent from it). One segment without a schedule."""
        return tuple(
            (start, tuple(Fraction(x, sum(a)) for x in a)) for start, a in self._schedule.spec()
        )

    @property
    def bound(self) -> float:
        """Over every prefix of a segment (the whole stream without a schedule), counted from
        the segment's start, ``|count_k - weight_k * prefix| <= bound``: the exact bound of the
        segment's tree, rounded up to a float, the largest over segments. With a ``window`` of
        B positions, ``3 * bound_k + B * weight_k`` (exact at window ends)."""
        return max(self._schedule.bounds(self.window))

    def _shuffled(self, stream: int) -> int:
        """The tree position that stream position ``stream`` shows: with a ``window``, the
        positions of each window are permuted (keyed by the seed and the window's index)."""
        if self.window <= 1:
            return stream
        j, s = divmod(stream, self.window)
        return j * self.window + feistel_index(self.window, self._window_seed, j, s)

    def _stream_position(self, position: int, epoch: int | None, where: str) -> int:
        position = check_counter(position, "position", where)
        epoch = self.epoch if epoch is None else check_counter(epoch, "epoch", where)
        return epoch * self.length + position

    def locate(self, position: int, epoch: int | None = None) -> tuple[int, int, int]:
        """``(source, source_epoch, index)`` at ``position`` of ``epoch`` (default: the current
        one). ``position`` may pass ``len(self)``: it then continues into later epochs."""
        stream = self._stream_position(position, epoch, "Mixture.locate")
        k, q = self._schedule.locate(self._shuffled(stream))
        if k in self._lengths:  # a source that grew: its epochs change length
            return k, *self._lengths[k].locate(q)
        n = self.sizes[k]
        source_epoch = q // n
        order = self._orders[k]
        if isinstance(order, Feistel):
            return k, source_epoch, feistel_index(n, order.seed, source_epoch, q % n)
        return k, source_epoch, int(order.indices(source_epoch, np.array([q % n]))[0])

    def counts(self, position: int, epoch: int | None = None) -> list[int]:
        """How many of the stream's positions before (``epoch``, ``position``) each source got."""
        stream = self._stream_position(position, epoch, "Mixture.counts")
        if self.window <= 1:
            return self._schedule.counts(stream)
        start = stream - stream % self.window  # exact at the window's start, then O(window)
        out = self._schedule.counts(start)
        for t in range(start, stream):
            out[self._schedule.locate(self._shuffled(t))[0]] += 1
        return out

    def sample_generator(self, source: int, source_epoch: int, index: int) -> np.random.Generator:
        """The stream :func:`seekdata.sample_rng` gives that sample: to reproduce it elsewhere."""
        return _streams.sample_generator(self.source_seeds[source], source_epoch, index)

    def set_epoch(self, epoch: int) -> None:
        """The mixture epoch used outside a seekdata loader (inside one, the loader's)."""
        self.epoch = check_counter(epoch, "epoch", "Mixture.set_epoch")

    # --- Dataset --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, position: int) -> Any:
        if not is_int(position):
            raise ArgumentError(f"Mixture: index must be an int; got {type(position).__name__}")
        if not 0 <= position < self.length:
            raise IndexError(f"Mixture: index must be in [0, {self.length}); got {position}")
        fetch = _sample.fetching()  # a seekdata loader fetches: its epoch is ours
        in_fetch = fetch is not None
        k, source_epoch, index = self.locate(int(position), fetch[1] if fetch is not None else None)
        if isinstance(self.datasets[k], _changes.Gone):
            name = repr(self.names[k]) if self.names is not None else str(k)
            raise RuntimeError(
                f"Mixture: source {name} is Mixture.gone (removed): it cannot be fetched, but "
                f"position {position} of epoch {self.epoch if fetch is None else fetch[1]} "
                f"reads it; resume from a checkpoint saved after its removal, or pass its dataset"
            )
        seed = self.source_seeds[k]
        # a thread worker never reseeds global RNG, which every thread shares (the loader
        # watches it instead: docs/threads.md)
        reseed = self.reseed_global_rng and not _sample.threaded()
        seeds = sample_seeds(seed, source_epoch, index) if reseed else None
        # in the main process outside a loader, put the caller's global RNG back afterwards;
        # inside a seekdata loader that reseeds, the loader does it once per batch
        in_main = torch.utils.data.get_worker_info() is None
        saved = _globalrng.capture() if seeds is not None and in_main and not in_fetch else None
        outer = _sample.nest()
        _sample.enter_sample(seed, source_epoch, index, seeds)
        try:
            return self.datasets[k][index]
        finally:
            _sample.unnest(outer)
            if saved is not None:  # the main process: its global RNG as it was
                _globalrng.restore(saved)

    def __repr__(self) -> str:
        names = self.names or [None] * len(self.datasets)
        parts = ", ".join(
            f"{'' if name is None else name + '='}{type(d).__name__}(n={n}) x {float(w):.4g}"
            for name, d, n, w in zip(names, self.datasets, self.sizes, self.weights, strict=True)
        )
        more = f", {len(self._schedule.segments)} segments" if self._scheduled else ""
        return f"Mixture([{parts}]{more}, length={self.length}, seed={self.seed})"
