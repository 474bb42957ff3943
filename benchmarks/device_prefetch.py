"""Step time with batches moved to the GPU ahead of the step (device=) vs in the loop.

    python benchmarks/device_prefetch.py [--batch-mb 128] [--steps 40] [--rounds 5] [--out FILE]
    python benchmarks/device_prefetch.py --device cpu --quick    # a dry run without a GPU

Each step is a synthetic GPU compute step (matmuls, calibrated to ``--compute-ratio`` times the
host-to-device copy of one batch) that reads its batch. The data costs the host nothing: each
item is a whole batch, one of four preallocated host buffers (``batch_size=None``), so the
cases differ only in how the batch reaches the GPU:

- ``pageable .to(device)``: unpinned batches, copied in the loop (blocking);
- ``pinned .to(device, non_blocking=True)``: pinned batches, copied in the loop on the compute
  stream, so copy and step run in turn;
- ``device=, device_prefetch=1`` / ``2``: the loader copies on a side stream, ahead of the step;
- ``already on the device``: the step alone, the floor.

Reports the median step time, synchronised after each step (ms), and the time per step over a
whole run without per-step synchronisation (the host runs ahead, as in training), each the
median over ``--rounds`` rounds run in a shuffled order; and the ratio to the pinned
``non_blocking`` case. Writes JSON (and a PNG). Without CUDA it says so and exits 0, unless
``--device cpu`` asks for the dry run (every case on the CPU: the figures mean nothing).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import _harness as H  # benchmarks/ is on sys.path when a script here runs
import seekdata


class Buffers(torch.utils.data.Dataset):
    """``steps`` items, each a whole batch: one of four preallocated host buffers."""

    def __init__(self, mb: float, steps: int, pinned: bool) -> None:
        count = max(1, int(mb * 2**20) // 4)
        self.buffers = [torch.full((count,), float(k)) for k in range(4)]
        if pinned:
            self.buffers = [b.pin_memory() for b in self.buffers]
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.buffers[i % 4]


class Clock:
    """Times work queued on ``device``: CUDA events on a GPU, the wall clock on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, fn: Callable[[], Any], repeat: int = 5) -> float:
        """Median time of ``fn``'s queued work, after one warm-up call."""
        fn()
        times = []
        for _ in range(repeat):
            self.sync()
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def make_step(device: torch.device, clock: Clock, copy_ms: float, ratio: float, size: int) -> Any:
    """A step of ``ratio`` × ``copy_ms`` of matmuls that reads its batch (returns the step and
    its calibrated time)."""
    a = torch.randn(size, size, device=device)
    out = torch.empty_like(a)
    one = clock.ms(lambda: torch.mm(a, a, out=out))
    count = max(1, round(ratio * copy_ms / max(one, 1e-6)))
    total = torch.zeros((), device=device)

    def step(batch: torch.Tensor) -> None:
        for _ in range(count):
            torch.mm(a, a, out=out)
        total.add_(batch[::4096].sum())  # the step depends on its batch

    return step, clock.ms(lambda: step(torch.zeros(4096 * 4, device=device))), count


def run(
    batches: Callable[[], Iterator[torch.Tensor]],
    move: Callable[[torch.Tensor], torch.Tensor] | None,
    step: Callable[[torch.Tensor], None],
    clock: Clock,
) -> dict[str, float]:
    """One pass synchronised after each step (median step ms), one without (ms per step)."""
    times = []
    it = batches()
    clock.sync()
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        step(batch if move is None else move(batch))
        clock.sync()
        times.append((time.perf_counter() - t0) * 1e3)
    count = 0
    clock.sync()
    t0 = time.perf_counter()
    for batch in batches():
        step(batch if move is None else move(batch))
        count += 1
    clock.sync()
    return {
        "step_ms": statistics.median(times),
        "run_ms_per_step": (time.perf_counter() - t0) * 1e3 / count,
    }


def main() -> int:
    parser = H.script_parser(__doc__.splitlines()[0], H.RESULTS / "device_prefetch.json")
    parser.add_argument("--device", default="cuda", help='"cuda" (default) or "cpu" (dry run)')
    parser.add_argument("--batch-mb", type=float, default=128.0, help="MB per batch")
    parser.add_argument("--steps", type=int, default=40, help="steps per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each case")
    parser.add_argument(
        "--compute-ratio", type=float, default=1.0, help="step time / copy time (1: balanced)"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("device_prefetch: needs CUDA (torch.cuda.is_available() is False); nothing run. "
              "--device cpu runs the script's code on the CPU (a dry run, no figures)")  # fmt: skip
        return 0
    if args.quick:
        args.batch_mb, args.steps, args.rounds = min(args.batch_mb, 16.0), 8, 2
    if device.type == "cpu":
        args.batch_mb = min(args.batch_mb, 4.0)
    cuda = device.type == "cuda"
    clock = Clock(device)
    pinned = Buffers(args.batch_mb, args.steps, pinned=cuda)
    pageable = Buffers(args.batch_mb, args.steps, pinned=False)
    copy_ms = clock.ms(lambda: pinned[0].to(device, non_blocking=True))
    step, step_ms, matmuls = make_step(
        device, clock, copy_ms, args.compute_ratio, 2048 if cuda else 256
    )
    print(f"copy of one batch ({args.batch_mb:g} MB, pinned): {copy_ms:.2f} ms; step: "
          f"{step_ms:.2f} ms ({matmuls} matmuls)")  # fmt: skip

    def loader(data: Buffers, **kw: Any) -> Callable[[], Iterator[torch.Tensor]]:
        made = seekdata.StatefulDataLoader(data, batch_size=None, step_rng=False, **kw)
        return lambda: iter(made)

    on_device = [b.to(device) for b in pinned.buffers]

    def moved(non_blocking: bool) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda b: b.to(device, non_blocking=non_blocking)

    cases: dict[str, tuple[Callable[[], Iterator[torch.Tensor]], Any]] = {
        "pageable .to(device)": (loader(pageable), moved(False)),
        "pinned .to(device, non_blocking=True)": (loader(pinned, pin_memory=cuda), moved(True)),
        "device=, device_prefetch=1": (loader(pinned, device=device, device_prefetch=1), None),
        "device=, device_prefetch=2": (loader(pinned, device=device, device_prefetch=2), None),
        "already on the device": (
            lambda: (on_device[i % 4] for i in range(args.steps)),
            None,
        ),
    }
    for batches, move in cases.values():  # warm-up: allocator, streams, pinned pools
        run(batches, move, step, clock)
    with H.quiet():
        measured = H.interleave(
            {name: (lambda c=c: run(c[0], c[1], step, clock)) for name, c in cases.items()},
            args.rounds,
        )
    base = "pinned .to(device, non_blocking=True)"
    base_step = H.median([m["step_ms"] for m in measured[base]])
    base_run = H.median([m["run_ms_per_step"] for m in measured[base]])
    rows = []
    for name, runs in measured.items():
        step_med = H.median([m["step_ms"] for m in runs])
        run_med = H.median([m["run_ms_per_step"] for m in runs])
        rows.append({
            "case": name,
            "step_ms": step_med,
            "run_ms_per_step": run_med,
            "step_vs_pinned": step_med / base_step,
            "run_vs_pinned": run_med / base_run,
        })  # fmt: skip
    print(H.table(rows, ["case", "step_ms", "run_ms_per_step", "step_vs_pinned", "run_vs_pinned"]))
    H.write(
        args.out, "device_prefetch", rows,
        device=str(device), batch_mb=args.batch_mb, steps=args.steps, rounds=args.rounds,
        copy_ms=copy_ms, compute_ms=step_ms, compute_ratio=args.compute_ratio,
    )  # fmt: skip
    with contextlib.suppress(ImportError):  # matplotlib is optional
        H.bar_plot(
            args.out, f"step time, {args.batch_mb:g} MB batches, step ≈ {args.compute_ratio:g}"
            "× copy", [r["case"] for r in rows], [r["step_ms"] for r in rows], "ms per step",
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
