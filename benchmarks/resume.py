"""Resume latency against position: seekdata vs torchdata's StatefulDataLoader vs DataLoader.

    python benchmarks/resume.py            # n = 1e7, ~7 min on 2 cores; results/resume.json + .png
    python benchmarks/resume.py --quick    # n = 1e5, a smoke run

Measures ``load_state_dict(state)`` -> first batch of a new iterator, for a shuffled map-style
dataset of n = 1e7 cheap samples (a 16-float tensor each), batch size 32, num_workers 0 and 2, at
positions 1e2 ... 5e6 (rounded down to whole batches). The states are the ones each loader saves
after really iterating to the position, over an index-only dataset of the same length (a state
holds the sampler's counters, not data). torch's DataLoader has no state: it resumes by
re-creating the same shuffled loader and discarding the consumed batches; a replay still running
after ``--replay-limit`` seconds is stopped, and the rest extrapolated at the rate it measured
(marked ``~``). Position 0
is a fresh start (first batch of a new loader, no state) for reference. Also the cost of
``state_dict()`` and its size.

Goal (issue 7): seekdata <= 5 ms and flat in position (num_workers=0; with workers the fresh
start of the worker processes dominates, see the position-0 row).
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _harness as H


def pivot(rows: list[dict], nw: int) -> list[dict]:
    out: dict[int, dict] = {}
    for r in rows:
        if r["num_workers"] != nw:
            continue
        row = out.setdefault(r["position"], {"position": r["position"] or "0 (fresh)"})
        mark = "~" if r["extrapolated"] else ""
        row[f"{r['loader']} ms"] = f"{mark}{r['ms']:,.4g}"
        if not r["extrapolated"]:
            row[f"{r['loader']} min"] = f"{r['min_ms']:,.4g}"
    return list(out.values())


def main() -> None:
    p = H.parser(__doc__ or "", "resume")
    p.add_argument("--n", type=int, default=None, help="dataset length (default 1e7)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--replay-limit", type=float, default=60.0, help="DataLoader skip limit (s)")
    p.add_argument(
        "--from-json",
        type=pathlib.Path,
        help="print and plot an earlier run's JSON, measure nothing",
    )
    args = p.parse_args()
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        report(saved["rows"], saved["state"], saved["n"], saved["batch_size"])
        plot(args.out.with_suffix(".png"), saved["rows"], saved["n"], saved["batch_size"])
        return
    n = args.n or (10**5 if args.quick else 10**7)
    nominal = [10**2, 10**3, 10**4, 10**5, 10**6, 5 * 10**6]
    positions = [q for q in nominal if q < n]
    workers = [0, 2]
    progress = H.Progress(len(workers) * (1 + len(positions)) * len(H.LOADERS))
    try:
        rows, costs = H.resume_sweep(
            n,
            positions,
            args.batch_size,
            workers,
            repeats=3 if args.quick else 7,
            replay_limit_s=args.replay_limit,
            budget_s=3.0 if args.quick else 6.0,
            progress=progress,
        )
    finally:
        progress.close()
    report(rows, costs, n, args.batch_size)
    H.write(args.out, "resume", rows, state=costs, n=n, batch_size=args.batch_size,
            replay_limit_s=args.replay_limit)  # fmt: skip
    plot(args.out.with_suffix(".png"), rows, n, args.batch_size)


def report(rows: list[dict], costs: list[dict], n: int, batch_size: int) -> None:
    columns = ["position"]
    for name in H.LOADERS:
        columns += [f"{name} ms", f"{name} min"]
    for nw in sorted({r["num_workers"] for r in rows}):
        print(f"\nload_state_dict -> first batch, n = {n:.0e}, batch {batch_size}, "
              f"num_workers = {nw} (ms: median and min; ~ = extrapolated)")  # fmt: skip
        print(H.table(pivot(rows, nw), columns))
    print("\nstate_dict(): µs per call (best of 5 x 200), bytes of json.dumps (tensors as lists)")
    print(H.table(costs, ["loader", "num_workers", "state_dict_us", "json_bytes", "json_native",
                          "torch_save_bytes"]))  # fmt: skip


def plot(out: pathlib.Path, rows: list[dict], n: int, batch_size: int) -> None:
    workers = sorted({r["num_workers"] for r in rows})
    fig, axes = H.pyplot().subplots(1, len(workers), figsize=(6 * len(workers), 4.5), sharey=True)
    for ax, nw in zip(axes, workers, strict=True):
        H.plot_resume(ax, [r for r in rows if r["num_workers"] == nw])
        ax.set_title(f"resume latency, n = {n:.0e}, batch {batch_size}, num_workers = {nw}")
    H.save(fig, out)


if __name__ == "__main__":
    with H.quiet():
        main()
