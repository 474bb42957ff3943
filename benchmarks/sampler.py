"""Sampler benchmark: index throughput, time to the first index, memory at n = 1e9.

    python benchmarks/sampler.py            # prints a table, writes results/sampler.json + .png

Goals (issue 2): >= 5 M indices/s vectorised; first index <= 5 ms at n = 1e7 and 1e9;
peak RSS growth < 100 MB for a 4-rank shuffled sampler over n = 1e9.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import torch.utils.data

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _harness as H
import seekdata


class Length:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def first_index_seekdata(n: int, epoch: int) -> float:
    t0 = time.perf_counter()
    s = seekdata.DistributedSampler(Length(n), num_replicas=4, rank=1, seed=0)
    s.set_epoch(epoch)
    next(iter(s))
    return time.perf_counter() - t0


def first_index_torch(n: int, epoch: int) -> float:
    t0 = time.perf_counter()
    s = torch.utils.data.DistributedSampler(Length(n), num_replicas=4, rank=1, seed=0)
    s.set_epoch(epoch)
    next(iter(s))
    return time.perf_counter() - t0


MEMORY_CHILD = """
import sys, numpy as np
sys.path.insert(0, {bench!r})
import _harness as H, seekdata
from sampler import Length
before = H.peak_rss_mb()
samplers = [seekdata.DistributedSampler(Length(10**9), 4, r, seed=0) for r in range(4)]
for s in samplers:
    s.set_epoch(3)
    it = iter(s)
    for _ in range(100_000):
        next(it)
    s.indices(3, np.arange(5 * 10**8, 5 * 10**8 + 1_000_000))
print(H.peak_rss_mb() - before)
"""


def main() -> None:
    args = H.parser(__doc__ or "", "sampler").parse_args()
    rows = []
    n_big = 10**9
    order = seekdata.order.Feistel(n_big, 0)
    chunk = 200_000 if args.quick else 1_000_000
    pos = np.arange(chunk, dtype=np.int64) + 123_456_789
    t = H.best_of(lambda: order.indices(7, pos), repeat=5)
    rows.append(
        {
            "measure": "indices/s, vectorised (feistel, n=1e9)",
            "seekdata": chunk / t,
            "goal": ">= 5e6",
        }
    )
    s = seekdata.DistributedSampler(Length(n_big), 4, 0, seed=0)
    it = iter(s)
    k = 100_000
    t0 = time.perf_counter()
    for _ in range(k):
        next(it)
    rows.append(
        {"measure": "indices/s, iterating the sampler", "seekdata": k / (time.perf_counter() - t0)}
    )
    for n in (10**7, 10**9):
        times = [first_index_seekdata(n, e) for e in range(1, 8)]
        row = {
            "measure": f"first index, n=1e{len(str(n)) - 1} (ms)",
            "seekdata": 1e3 * H.median(times),
            "goal": "<= 5",
        }
        if n == 10**7:
            row["torch"] = 1e3 * H.median([first_index_torch(n, e) for e in range(1, 4)])
        rows.append(row)
    child = MEMORY_CHILD.format(bench=str(__import__("pathlib").Path(__file__).resolve().parent))
    growth = float(
        subprocess.run(
            [sys.executable, "-c", child], capture_output=True, text=True, check=True, timeout=600
        ).stdout.strip()
    )
    rows.append(
        {"measure": "peak RSS growth, 4 ranks, n=1e9 (MB)", "seekdata": growth, "goal": "< 100"}
    )
    print(H.table(rows, ["measure", "seekdata", "torch", "goal"]))
    H.write(args.out, "sampler", rows)
    H.bar_plot(
        args.out,
        "time to the first index (ms, log)",
        ["seekdata n=1e7", "seekdata n=1e9", "torch n=1e7"],
        [rows[2]["seekdata"], rows[3]["seekdata"], rows[2]["torch"]],
        "ms",
        log=True,
    )


if __name__ == "__main__":
    main()
