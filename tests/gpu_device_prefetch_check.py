"""GPU check of ``StatefulDataLoader(device=, device_prefetch=)`` (needs CUDA; not collected by
pytest). Run ``python tests/gpu_device_prefetch_check.py`` on a GPU node; it prints one JSON
line and exits 0 when every check holds:

- batches (nested: a dict, a namedtuple, a non-tensor leaf) arrive on the device, bit-identical
  to the loader's CPU batches, map-style with 0 and 2 workers and iterable with 2, depth 1 and 3;
- a training loop with CUDA Dropout, interrupted mid-epoch and resumed from ``state_dict()``
  taken while batches wait ahead, with 4 -> 2 workers, gives bit-identical losses and weights;
- a step that reads its batch only after a long kernel, and drops it at once, sees the right
  values (the caller's stream waits for the copy; ``record_stream`` keeps the memory alive);
- the overlap is real: with a copy as long as the step, N steps take clearly less time than a
  pinned ``.to(device, non_blocking=True)`` in the loop, which runs copy and step in turn.

``--device cpu`` runs the same script on a CPU machine (the overlap check is skipped): it keeps
the script from rotting where there is no GPU (tests/loader/test_device_prefetch.py runs it so).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from typing import Any

import torch

import seekdata
from seekdata._loader.device import move
from seekdata.testing import first_difference

Pair = collections.namedtuple("Pair", ["image", "label"])


class Noisy(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> dict[str, Any]:
        x = torch.full((16,), i / 96) + 0.1 * torch.randn(16)
        return {"pair": Pair(x, torch.tensor(float(i % 2))), "index": i, "name": f"s{i}"}


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 48, step):
            yield {"x": torch.randn(16), "i": torch.tensor(i)}


def leaves(batch: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    move(batch, lambda t: found.append(t) or t)
    return found


def to_cpu(batch: Any) -> Any:
    return move(batch, lambda t: t.cpu())


def same_batches(device: str) -> dict[str, Any]:
    """Every batch on ``device``, equal to the CPU path's, for each engine and depth."""
    out: dict[str, Any] = {}
    for kind, workers in (("map", 0), ("map", 2), ("iterable", 2)):
        for depth in (1, 3):

            def make(kind: str = kind, workers: int = workers, **kw: Any) -> Any:
                if kind == "map":
                    return seekdata.StatefulDataLoader(
                        Noisy(), batch_size=8, shuffle=True, seed=3, num_workers=workers, **kw
                    )
                return seekdata.StatefulDataLoader(
                    Stream(), batch_size=8, seed=3, num_workers=workers, **kw
                )

            plain, ahead = make(), make(device=device, device_prefetch=depth)
            want = [b for _ in range(2) for b in plain]  # two epochs
            got = [b for _ in range(2) for b in ahead]
            on = {str(t.device) for b in got for t in leaves(b)}
            diff = first_difference(want, [to_cpu(b) for b in got])
            name = f"{kind}, {workers} workers, depth {depth}"
            out[name] = {"devices": sorted(on), "equal": diff is None, "difference": diff}
    return out


def model_with_dropout(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.Dropout(0.5), torch.nn.Linear(64, 1)
    )
    return model.to(device)


def train(device: str, steps: int, workers: int, state: Any = None, save_at: int = -1) -> Any:
    """Losses and final weights; (the state at ``save_at``) when it is reached."""
    model = model_with_dropout(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = seekdata.StatefulDataLoader(
        Noisy(), batch_size=8, shuffle=True, seed=0, num_workers=workers,
        device=device, device_prefetch=2,
    )  # fmt: skip
    step, losses, saved = 0, [], None
    if state is not None:
        loader.load_state_dict(state["loader"])
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    while step < steps:
        for batch in loader:
            x, y = batch["pair"]
            loss = (model(x).squeeze(-1) - y).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().cpu())
            step += 1
            if step == save_at:  # batches wait ahead of this step: the state must not see them
                saved = json.loads(json.dumps(loader.state_dict()))
                saved = {
                    "loader": saved,
                    "model": {k: v.clone() for k, v in model.state_dict().items()},
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                }
            if step == steps:
                break
    weights = [p.detach().cpu() for p in model.parameters()]
    return losses, weights, saved


def resume(device: str) -> dict[str, Any]:
    full, w_full, saved = train(device, 30, workers=4, save_at=17)  # 12 a epoch: mid-epoch 1
    rest, w_rest, _ = train(device, 30, workers=2, state=saved)
    return {
        "losses_equal": all(torch.equal(a, b) for a, b in zip(full[17:], rest, strict=True)),
        "weights_equal": all(torch.equal(a, b) for a, b in zip(w_full, w_rest, strict=True)),
        "resumed_steps": len(rest),
    }


class Big(torch.utils.data.Dataset):
    """Each item a whole batch: one of a few pinned host buffers (no host cost per batch)."""

    def __init__(self, mb: int, n: int, pinned: bool) -> None:
        count = mb * 2**20 // 4
        self.buffers = [torch.full((count,), float(k)) for k in range(4)]
        if pinned:
            self.buffers = [b.pin_memory() for b in self.buffers]
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.buffers[i % 4]


def late_reads(device: str) -> dict[str, Any]:
    """Each step reads its batch after a long kernel and drops it at once: with a wrong wait
    or a missing record_stream the next copies would land in memory still being read."""
    data = Big(64, 24, pinned=device != "cpu")
    loader = seekdata.StatefulDataLoader(
        data, batch_size=None, device=device, device_prefetch=3, step_rng=False
    )
    sums = []
    for batch in loader:
        if device != "cpu":
            torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time before the read
        sums.append(batch[:: 2**16].sum())  # kept on the device; the batch is dropped
    want = [float(data[i][:: 2**16].sum()) for i in range(len(data))]
    got = [float(s) for s in sums]
    return {"equal": got == want, "steps": len(got)}


def overlap(device: str, steps: int = 20) -> dict[str, Any]:
    """Wall time of ``steps`` steps whose compute is as long as the copy: look-ahead vs a
    pinned non_blocking copy in the loop (same stream: copy and compute in turn)."""
    data = Big(256, steps, pinned=True)

    def gpu_ms(fn: Any) -> float:  # after a warm-up call
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    copy_ms = gpu_ms(lambda: data[0].to(device, non_blocking=True))
    cycles = int(1_000_000 * copy_ms / gpu_ms(lambda: torch.cuda._sleep(1_000_000)))

    def run(loader: Any, move: bool) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for batch in loader:
            if move:
                batch = batch.to(device, non_blocking=True)
            torch.cuda._sleep(cycles)
            batch[:1].add_(1)  # the step reads (and writes) its batch
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    plain = seekdata.StatefulDataLoader(data, batch_size=None, pin_memory=True, step_rng=False)
    ahead = seekdata.StatefulDataLoader(
        data, batch_size=None, device=device, device_prefetch=1, step_rng=False
    )
    run(ahead, False)  # warm-up: the allocator, the stream
    serial = min(run(plain, True) for _ in range(3))
    overlapped = min(run(ahead, False) for _ in range(3))
    return {
        "copy_ms": round(copy_ms, 2),
        "serial_ms": round(serial, 1),
        "overlapped_ms": round(overlapped, 1),
        "ratio": round(overlapped / serial, 3),  # ~0.5 when copy and step fully overlap
        "ok": overlapped < 0.8 * serial,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help='"cuda" (default) or "cpu" (a dry run)')
    args = p.parse_args()
    if args.device != "cpu" and not torch.cuda.is_available():
        print("gpu_device_prefetch_check: needs CUDA (or --device cpu for a dry run)")
        return 2
    out: dict[str, Any] = {"torch": torch.__version__, "device": args.device}
    if args.device != "cpu":
        out["gpu"] = torch.cuda.get_device_name(0)
    out["batches"] = same_batches(args.device)
    out["resume"] = resume(args.device)
    out["late_reads"] = late_reads(args.device)
    if args.device != "cpu":
        out["overlap"] = overlap(args.device)
    print(json.dumps(out))
    want_device = "cpu" if args.device == "cpu" else "cuda:0"
    ok = all(b["equal"] and b["devices"] == [want_device] for b in out["batches"].values())
    ok = ok and out["resume"]["losses_equal"] and out["resume"]["weights_equal"]
    ok = ok and out["late_reads"]["equal"]
    ok = ok and out.get("overlap", {"ok": True})["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
