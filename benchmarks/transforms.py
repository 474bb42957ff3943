"""Per-sample cost of keyed augmentation: deriving the sample's rng, and a typical pipeline.

    python benchmarks/transforms.py [--number 5000] [--repeat 7] [--size 64] [--out FILE]

Prints a table (µs per sample: best and median of ``--repeat`` runs of ``--number`` calls)
and writes it as JSON to ``--out``. A new dataset index every call, as in a real epoch.

"shared generator" rows run the same operations on one long-lived Philox ``Generator`` that
every sample draws from in turn: what global RNG amounts to (stateful, order-dependent, not
resumable), with no per-sample derivation and no per-step sub-streams. The difference between
the "keyed" and "shared generator" rows is the price of exact resumability.
"""

from __future__ import annotations

import itertools
import statistics
import timeit
from collections.abc import Callable

import numpy as np
import torch

import _harness as H  # benchmarks/ is on sys.path when a script here runs
from seekdata._core.sample import enter_sample, exit_sample
from seekdata.rng import global_seeds, sample_generator, sample_rng, sample_scope
from seekdata.transforms import (
    ColorJitter,
    Compose,
    GaussianNoise,
    RandomHorizontalFlip,
    RandomResizedCrop,
)

SEED, EPOCH = 0, 3


def rng_cases() -> dict[str, Callable[[], object]]:
    index = itertools.count()
    seeds = global_seeds(SEED, EPOCH, np.arange(1 << 16)).tolist()

    def loader_fetch() -> object:  # the loader's hot path, reseed_global_rng=False
        enter_sample(SEED, EPOCH, next(index), None)
        rng = sample_rng()
        exit_sample()
        return rng

    def loader_fetch_reseed() -> object:  # default: also seeds torch/numpy/random globals
        i = next(index)
        enter_sample(SEED, EPOCH, i, seeds[i & 0xFFFF])
        rng = sample_rng()
        exit_sample()
        return rng

    def scope(reseed: bool) -> Callable[[], object]:
        def run() -> object:
            with sample_scope(SEED, EPOCH, next(index), reseed_global_rng=reseed) as rng:
                return rng

        return run

    noop: Callable[[object, np.random.Generator], object] = lambda sample, rng: sample  # noqa: E731
    four_steps = Compose([noop] * 4)

    def compose_overhead() -> object:
        enter_sample(SEED, EPOCH, next(index), None)
        out = four_steps(None, sample_rng())
        exit_sample()
        return out

    return {
        "enter_sample + sample_rng  [loader, no reseed]": loader_fetch,
        "enter_sample + sample_rng  [loader, reseed globals]": loader_fetch_reseed,
        "sample_scope(reseed_global_rng=False)": scope(False),
        "sample_scope()  [+ save/restore globals]": scope(True),
        "sample_generator(seed, epoch, index)  [new Philox]": lambda: sample_generator(
            SEED, EPOCH, next(index)
        ),
        "np.random.default_rng((seed, epoch, index))": lambda: np.random.default_rng(
            (SEED, EPOCH, next(index))
        ),
        "  + Compose of 4 no-op steps  [sub-streams]": compose_overhead,
    }


def pipeline_cases(size: int) -> dict[str, Callable[[], object]]:
    index = itertools.count()
    x = torch.rand(3, size, size)
    steps = [
        RandomResizedCrop(size * 7 // 8),
        RandomHorizontalFlip(0.5),
        ColorJitter(0.4, 0.4),
        GaussianNoise(0.05),
    ]
    pipe = Compose(steps)
    shared = np.random.Generator(np.random.Philox(0))  # same bit generator as the keyed rows

    def keyed() -> object:
        enter_sample(SEED, EPOCH, next(index), None)
        out = pipe(x, sample_rng())
        exit_sample()
        return out

    def stateful() -> object:
        out = x
        for step in steps:
            out = step(out, shared)
        return out

    def stateful_no_noise() -> object:
        out = x
        for step in steps[:3]:
            out = step(out, shared)
        return out

    def keyed_no_noise() -> object:
        enter_sample(SEED, EPOCH, next(index), None)
        out = no_noise(x, sample_rng())
        exit_sample()
        return out

    no_noise = Compose(steps[:3])
    name = f"3x{size}x{size} float32"
    return {
        f"pipeline {name}: keyed (fetch + Compose)": keyed,
        f"pipeline {name}: shared generator": stateful,
        "  without GaussianNoise: keyed": keyed_no_noise,
        "  without GaussianNoise: shared generator": stateful_no_noise,
    }


def main() -> None:
    parser = H.script_parser(__doc__.splitlines()[0], H.RESULTS / "transforms.json")
    parser.add_argument("--number", type=int, default=5000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs per case")
    parser.add_argument("--size", type=int, default=64, help="image side of the pipeline rows")
    args = parser.parse_args()
    if args.quick:
        args.number, args.repeat = 200, 2
    torch.set_num_threads(1)  # per-sample work runs in one worker process

    cases = {**rng_cases(), **pipeline_cases(args.size)}
    slow = ("pipeline", "  without")  # about 100x the cost: fewer calls per run
    numbers = {n: max(1, args.number // 10 if n.startswith(slow) else args.number) for n in cases}
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()  # warm caches (key hash per epoch, scratch generators)
    for _ in range(args.repeat):  # interleaved, so a busy machine slows every case alike
        for name, fn in cases.items():
            runs[name].append(timeit.timeit(fn, number=numbers[name]) / numbers[name] * 1e6)
    rows = [
        {
            "case": name,
            "best_us": min(runs[name]),
            "median_us": statistics.median(runs[name]),
            "calls": numbers[name],
        }
        for name in cases
    ]

    print(H.table(rows, ["case", "best_us", "median_us", "calls"]))
    H.write(args.out, "transforms", rows, torch_threads=1, image_size=args.size)


if __name__ == "__main__":
    main()
