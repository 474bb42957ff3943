"""Cost of seekdata.set_step_rng per training step, next to what it replaces.

    python benchmarks/step_rng.py [--number 20000] [--repeat 7] [--out FILE]

Prints a table (µs per call: best and median of ``--repeat`` runs of ``--number`` calls) and
writes it as JSON to ``--out``.
"""

from __future__ import annotations

import random
import statistics
import timeit
from collections.abc import Callable

import numpy as np
import torch

import _harness as H  # benchmarks/ is on sys.path when a script here runs
from seekdata.rng import derive_key
from seekdata.training import capture_rng, restore_rng, set_step_rng


def cases() -> dict[str, Callable[[], object]]:
    state = capture_rng()
    step = iter(range(10**9))  # a new step each call: no key-cache hits beyond the first
    return {
        "set_step_rng(seed, step, rank=0)": lambda: set_step_rng(0, next(step), rank=0),
        "set_step_rng(seed, step)  [rank lookup]": lambda: set_step_rng(0, next(step)),
        "set_step_rng, same step (cached key)": lambda: set_step_rng(0, 1, rank=0),
        "key hash only (SeedSequence, new step)": lambda: derive_key(1, next(step), 0, words=6),
        "torch.default_generator.manual_seed": lambda: torch.default_generator.manual_seed(1),
        "np.random.seed": lambda: np.random.seed(1),
        "random.seed": lambda: random.seed(1),
        "torch.manual_seed  [not used]": lambda: torch.manual_seed(1),
        "capture_rng()": capture_rng,
        "restore_rng(state)": lambda: restore_rng(state),
    }


def main() -> None:
    parser = H.script_parser(__doc__.splitlines()[0], H.RESULTS / "step_rng.json")
    parser.add_argument("--number", type=int, default=20000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs per case")
    args = parser.parse_args()
    if args.quick:
        args.number, args.repeat = 500, 2

    rows = []
    for name, fn in cases().items():
        slow = "[not used]" in name or "_rng(" in name  # ~100x slower: fewer calls
        number = max(1, args.number // 100) if slow else args.number
        runs = [t / number * 1e6 for t in timeit.repeat(fn, number=number, repeat=args.repeat)]
        best, median = min(runs), statistics.median(runs)
        rows.append({"case": name, "best_us": best, "median_us": median, "calls": number})

    print(H.table(rows, ["case", "best_us", "median_us", "calls"]))
    H.write(args.out, "step_rng", rows, cuda=torch.cuda.is_available())


if __name__ == "__main__":
    main()
