"""What ``seekdata bench`` and ``benchmarks/`` measure: loaders, throughput, resume."""

from __future__ import annotations

import copy
import functools
import io
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

from seekdata._core.sample import sample_rng
from seekdata.loader import StatefulDataLoader
from seekdata.tools.bench._harness import LOADERS, Progress, best_of, median
from seekdata.tools.bench._workloads import Reseeding, ReseedingBatches, grain_loader

# --- what is measured ---------------------------------------------------------------------------


class Synthetic(torch.utils.data.Dataset):
    """``n`` float32 samples of ``shape``: sample i is ``i`` plus one random draw, after
    ``work_us`` µs of busy work. ``draw`` is where the draw comes from: ``"global"`` (numpy's
    global RNG: an unmodified dataset), ``"sample"`` (:func:`seekdata.sample_rng`, what a dataset
    written for ``reseed_global_rng=False`` does) or ``None`` (no randomness)."""

    def __init__(
        self, n: int, shape: Sequence[int] = (16,), work_us: float = 0.0, draw: str | None = None
    ) -> None:
        self.n, self.shape, self.work_s, self.draw = n, tuple(shape), work_us * 1e-6, draw

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.work_s:
            end = time.perf_counter() + self.work_s
            while time.perf_counter() < end:
                pass
        value = float(index)
        if self.draw == "global":
            value += np.random.random()
        elif self.draw == "sample":
            value += sample_rng().random()
        return torch.full(self.shape, value)


class Indices(torch.utils.data.Dataset):
    """The cheapest dataset of length ``n``: sample i is ``i``. Used to reach a position."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def make_loader(
    loader: str,
    dataset: Any,
    batch_size: int,
    num_workers: int,
    *,
    seed: int = 0,
    reseed_global_rng: Any = True,
    pin_memory: bool = False,
    batched_fetch: bool = True,
    step_rng: bool = True,
) -> Any:
    """A shuffled loader of kind ``loader`` over ``dataset``: one of :data:`LOADERS`,
    ``"seekdata threads"`` (``worker_method="thread"``; ``reseed_global_rng`` names the
    generators it watches), or ``"DataLoader + reseed"`` (torch's DataLoader over
    :class:`Reseeding`, or :class:`ReseedingBatches` for a dataset with ``__getitems__``: the
    fair baseline for seekdata's default) or ``"grain"`` (when installed; its batches are
    numpy arrays)."""
    common: dict[str, Any] = {
        "batch_size": batch_size,
        "shuffle": True,
        "num_workers": num_workers,
        "pin_memory": pin_memory,
    }
    if loader in ("seekdata", "seekdata threads"):
        # threads: reseed_global_rng names the generators watched (a global draw raises: it
        # cannot be exact in threads); the sweep passes False, to time a dataset that draws
        # (its advice says so: _report.draws_global_rng)
        method = "thread" if loader == "seekdata threads" else "multiprocessing"
        return StatefulDataLoader(
            dataset,
            seed=seed,
            reseed_global_rng=reseed_global_rng,
            batched_fetch=batched_fetch,
            step_rng=step_rng,
            worker_method=method,
            **common,
        )
    if loader == "grain":
        return grain_loader(dataset, batch_size, num_workers, seed)
    generator = torch.Generator().manual_seed(seed)  # torch's own rule: order from a generator
    if loader == "DataLoader":
        return torch.utils.data.DataLoader(dataset, generator=generator, **common)
    if loader == "DataLoader + reseed":
        batched = callable(getattr(dataset, "__getitems__", None))
        wrapped = ReseedingBatches(dataset) if batched else Reseeding(dataset)
        return torch.utils.data.DataLoader(wrapped, generator=generator, **common)
    if loader == "torchdata":
        from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

        return TorchdataLoader(dataset, generator=generator, **common)
    raise ValueError(
        f"make_loader: loader must be one of "
        f"{(*LOADERS, 'seekdata threads', 'DataLoader + reseed', 'grain')}; "
        f"got {loader!r}"
    )


def _to(batch: Any, device: str) -> Any:
    if isinstance(batch, dict):  # a table's columns
        return {k: _to(v, device) for k, v in batch.items()}
    if isinstance(batch, np.ndarray):  # grain
        batch = torch.from_numpy(batch)
    return batch.to(device, non_blocking=True)


def batch_len(batch: Any) -> int:
    """Samples in a batch: a tensor's or array's first dimension, a table's first column's."""
    if isinstance(batch, dict):
        return len(next(iter(batch.values())))
    return len(batch)


def run_loader(
    loader: Any,
    batches: int,
    warmup: int = 0,
    device: str | None = None,
    max_s: float = math.inf,
) -> dict[str, float]:
    """One run of ``loader``: ``startup_s``, seconds from ``iter()`` to the first batch (worker
    start-up, epoch set-up), and ``samples_s``, samples/s over ``batches`` batches after
    ``warmup`` more (the steady state), or over as many as ``max_s`` seconds allow. Each batch
    is moved to ``device`` when given. The iterator is deleted before returning, which shuts
    its workers down."""
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    startup = time.perf_counter() - t0
    for _ in range(warmup):
        next(it)
    count = 0
    t1 = time.perf_counter()
    deadline = t1 + max_s
    for k in range(batches):
        batch = next(it)
        if device is not None:
            batch = _to(batch, device)
        count += batch_len(batch)
        if k % 16 == 15 and time.perf_counter() > deadline:
            break
    if device is not None:
        torch.cuda.synchronize(device)
    rate = count / (time.perf_counter() - t1)
    del it
    return {"startup_s": startup, "samples_s": rate}


def samples_per_s(loader: Any, batches: int, device: str | None = None) -> float:
    """Samples/s over ``batches`` batches, timed from the first batch on (so worker start-up
    and epoch set-up are not counted); each batch moved to ``device`` when given."""
    return run_loader(loader, batches, 0, device)["samples_s"]


def first_batch_s(loader: Any, state: Any = None) -> float:
    """Seconds from ``load_state_dict(state)`` (when given) to the first batch of a new iterator."""
    t0 = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - t0


def replay_s(loader: Any, skip: int, limit_s: float = math.inf) -> tuple[float, float]:
    """How torch's DataLoader resumes: seconds to the first batch of a new iterator after
    discarding ``skip`` batches. Returns (seconds, seconds measured): past ``limit_s`` the rest
    is extrapolated at the rate measured after the first batch, and the two differ."""
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)  # the epoch's set-up (e.g. randperm) is paid here, once
    t1 = time.perf_counter()
    for j in range(1, skip + 1):
        next(it)
        if j % 64 == 0 and (now := time.perf_counter()) - t0 > limit_s:
            return now - t0 + (now - t1) / j * (skip - j), now - t0
    elapsed = time.perf_counter() - t0
    return elapsed, elapsed


def states_at(loader: Any, steps: Sequence[int]) -> dict[int, Any]:
    """Iterate ``loader`` once; a deep copy of ``state_dict()`` after each of ``steps`` batches."""
    states: dict[int, Any] = {}
    it = iter(loader)
    done = 0
    for k in sorted(set(steps)):
        for _ in range(k - done):
            next(it)
        done = k
        states[k] = copy.deepcopy(loader.state_dict())
    return states


def _json_ready(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def state_cost(loader: Any, batches: int = 3, number: int = 200) -> dict[str, Any]:
    """``state_dict()`` of a loader ``batches`` into an epoch: µs per call and its size.

    ``json_bytes`` is ``len(json.dumps(state))``; a state that is not JSON-native (tensors) is
    measured with its tensors written as lists, and ``json_native`` says so."""
    it = iter(loader)
    for _ in range(batches):
        next(it)
    us = 1e6 * best_of(loader.state_dict, repeat=5, number=number)
    state = loader.state_dict()
    try:
        size, native = len(json.dumps(state)), True
    except TypeError:
        size, native = len(json.dumps(_json_ready(state))), False
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return {
        "state_dict_us": us,
        "json_bytes": size,
        "json_native": native,
        "torch_save_bytes": len(buffer.getvalue()),
    }


def _measure(fn: Callable[[], float], repeats: int, budget_s: float) -> list[float]:
    """``fn()`` up to ``repeats`` times, stopping early once ``budget_s`` is spent (>= 1 run)."""
    times: list[float] = []
    t0 = time.perf_counter()
    while len(times) < repeats and (not times or time.perf_counter() - t0 < budget_s):
        times.append(fn())
    return times


def resume_sweep(
    n: int,
    positions: Sequence[int],
    batch_size: int,
    workers: Sequence[int],
    *,
    repeats: int = 5,
    replay_limit_s: float = 60.0,
    budget_s: float = 20.0,
    progress: Progress | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Resume latency (``load_state_dict`` -> first batch, ms) at each position of an epoch of
    ``n`` shuffled samples, and the ``state_dict()`` cost and size at each worker count.

    States are those the loaders save after really iterating to the position (over
    :class:`Indices`, the same length; a state holds counters, not data). seekdata's state does
    not depend on ``num_workers``, so one pass serves all. torch's DataLoader resumes by
    iterating and discarding the consumed batches; a replay that runs past ``replay_limit_s`` is
    stopped there and the rest extrapolated at its measured rate (``extrapolated``,
    ``measured_s``).
    Position 0 is a fresh start: the first batch of a new loader, for reference.
    """
    steps = sorted({p // batch_size for p in positions if p // batch_size > 0})
    dataset = Synthetic(n, draw="global")
    cheap = Indices(n)
    rows: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
    # reseeding is not part of the state (and costs µs per sample): off for reaching the position
    reach = make_loader("seekdata", cheap, batch_size, 0, reseed_global_rng=False)
    seek_states = states_at(reach, steps)
    for nw in workers:
        td_states = states_at(make_loader("torchdata", cheap, batch_size, nw), steps)
        for name in LOADERS:
            row = {"loader": name, "num_workers": nw}
            if name != "DataLoader":
                row.update(state_cost(make_loader(name, dataset, batch_size, nw)))
                costs.append(row)
        for k in [0, *steps]:
            for name in LOADERS:
                first = functools.partial(_first, name, dataset, batch_size, nw)
                method, measured = "load_state_dict", None
                if k == 0:
                    times = _measure(first, repeats, budget_s)
                    method = "fresh start"
                elif name == "DataLoader":
                    method = "iterate and discard"
                    times = []
                    while len(times) < 3 and sum(times) < 5.0 and measured is None:
                        loader = make_loader(name, dataset, batch_size, nw)
                        total, done = replay_s(loader, k, replay_limit_s)
                        del loader
                        times.append(total)
                        measured = done if done < total else None
                else:
                    state = (seek_states if name == "seekdata" else td_states)[k]
                    times = _measure(functools.partial(first, state), repeats, budget_s)
                extrapolated = measured is not None
                rows.append(
                    {
                        "loader": name,
                        "num_workers": nw,
                        "position": k * batch_size,
                        "ms": 1e3 * median(times),
                        "min_ms": 1e3 * min(times),
                        "runs": len(times),
                        "method": method,
                        "extrapolated": extrapolated,
                        "measured_s": measured,  # extrapolated: the part really run
                    }
                )
                if progress is not None:
                    progress.step(f"resume {name} w{nw} @{k * batch_size}")
    return rows, costs


def _first(name: str, dataset: Any, batch_size: int, nw: int, state: Any = None) -> float:
    return first_batch_s(make_loader(name, dataset, batch_size, nw), state)
