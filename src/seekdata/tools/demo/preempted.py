"""The main job: a DDP run killed mid-epoch and resumed is the same run, bit for bit.

``python -m seekdata.demo`` launches a real DDP job with torchrun (gloo on CPU, NCCL where
GPUs are present): a small model with Dropout trains on a synthetic dataset with random
augmentation, ``num_workers > 0``. A second job is killed with SIGKILL mid-epoch (the time
limit) at steps drawn at random from ``--seed`` (the same steps on every run of the same flags;
another ``--seed``, or ``--kill-at``, for others), resubmitted each time from its last
checkpoint, with another ``num_workers``. The demo then compares per-step losses on every rank
and the final parameters with the uninterrupted job, prints a table and writes a plot.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import seekdata
from seekdata.tools.demo import figures, supervisor

EPOCH_STEPS_HINT = "an epoch is n / (batch size × ranks) steps"
_CONFIG_ENV = "SEEKDATA_DEMO_CONFIG"
_WORKER_MODULE = "seekdata.tools.demo.preempted"  # what torchrun starts on each rank


# --- the training job (one rank) -----------------------------------------------------------------


class Synthetic(torch.utils.data.Dataset):
    """Points on noisy class clusters, augmented with global RNG (as third-party code does)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        label = i % 4
        base = torch.tensor([np.cos(label * 1.57), np.sin(label * 1.57)] * 4, dtype=torch.float32)
        x = base + 0.3 * torch.randn(8)  # augmentation: torch global RNG
        if np.random.rand() < 0.5:  # augmentation: numpy global RNG
            x = x.flip(0)
        return x, torch.tensor(label)


def _train(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from seekdata.checkpoint import CheckpointManager

    torch.set_num_threads(1)  # bit-exact CPU math: no thread-count-dependent reductions
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    run = Path(args.run_dir)
    dataset = Synthetic(args.n)
    sampler = seekdata.DistributedSampler(dataset, seed=args.seed)
    loader = seekdata.StatefulDataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        seed=args.seed,
    )
    torch.manual_seed(0)  # the same initial weights on every rank (not a per-step key)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 4)
    ).to(device)
    model = DDP(net)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    manager = CheckpointManager(run / "ckpt", keep_last=2)
    step, epoch = 0, 0
    ckpt = manager.load_latest(map_location=device)
    if ckpt is not None:
        net.load_state_dict(ckpt["model"])
        optim.load_state_dict(ckpt["optim"])
        loader.load_state_dict(ckpt["loader"])  # global: the same on every rank, any workers
        step, epoch = ckpt["step"], ckpt["epoch"]
    log = (run / f"rank{rank}.jsonl").open("a")
    while step < args.steps:
        sampler.set_epoch(epoch)  # never rewinds a restored epoch
        for x, y in loader:
            seekdata.set_step_rng(args.seed, step)  # Dropout: a pure function of (seed, step, rank)
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            optim.zero_grad()
            loss.backward()
            optim.step()
            step += 1
            log.write(json.dumps({"step": step, "epoch": epoch, "loss": loss.item()}) + "\n")
            log.flush()
            if step % args.ckpt_every == 0 or step == args.steps:
                state = {
                    "model": net.state_dict(),
                    "optim": optim.state_dict(),
                    "loader": loader.state_dict(),
                    "step": step,
                    "epoch": epoch,
                }
                manager.save(step, state)  # rank 0 writes atomically, every rank waits
            if step >= args.steps:
                break
        else:
            epoch += 1
    if rank == 0:
        torch.save({k: v.cpu() for k, v in net.state_dict().items()}, run / "final.pt")
    dist.barrier()
    dist.destroy_process_group()


# --- the orchestrator ----------------------------------------------------------------------------


def _launch(args: argparse.Namespace, run: Path, workers: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={args.ranks}",
        "-m",
        _WORKER_MODULE,
        "--worker",
    ]
    # the job's settings travel in the environment: torchrun would claim abbreviated flags
    config = {**vars(args), "run_dir": str(run), "workers": workers}
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        _CONFIG_ENV: json.dumps(config),
    }
    return supervisor.start(cmd, env, run / "torchrun.log")


def _last_step(run: Path, rank: int = 0, skip: int = 0) -> int:
    """The last step ``rank`` logged, in lines after the first ``skip`` (earlier jobs')."""
    path = run / f"rank{rank}.jsonl"
    if not path.exists():
        return 0
    lines = path.read_text().splitlines()[skip:]
    return json.loads(lines[-1])["step"] if lines else 0


def _wait(
    proc: subprocess.Popen[bytes],
    run: Path,
    timeout: float,
    kill_at: int | None,
    finished: Callable[[], bool] = lambda: False,
    skip: int = 0,
) -> bool:
    """Wait for the job; SIGKILL its whole process group once rank 0 logged ``kill_at`` (in
    this job: after the first ``skip`` lines of its log, which earlier jobs wrote).

    A job that failed although ``finished()`` (its final results are all written) and whose
    log names a SIGABRT is reported as torch's abort at interpreter shutdown, not a failure."""
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if kill_at is not None and _last_step(run, 0, skip) >= kill_at:
                supervisor.kill(proc)  # the time limit: no warning, no cleanup
                return False
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"demo: the job in {run} ran past {timeout:.0f} s; see {run / 'torchrun.log'}"
                )
            time.sleep(0.05)
    finally:
        supervisor.kill(proc)  # a job still running when this wait ends (a timeout, Ctrl-C)
    if proc.returncode != 0:
        log = run / "torchrun.log"
        if finished() and _ABORT in log.read_text(errors="replace"):
            print(
                f"note: a rank of the job in {run} was killed by SIGABRT at interpreter "
                f"shutdown, after it wrote all its results: torch's gloo threads "
                f"(pytorch/pytorch#190489), not the data; scripts avoid it by ending with "
                f"seekdata.exit_ddp(). See {log}",
                flush=True,
            )
            return True
        raise RuntimeError(f"demo: the job in {run} failed (exit {proc.returncode}); see {log}")
    return True


#: how torchrun's failure report names a rank that died of SIGABRT
_ABORT = "(SIGABRT)"


def _complete(run: Path, ranks: int, steps: int) -> Callable[[], bool]:
    """Whether every rank logged its last step and rank 0 saved the final parameters."""
    return lambda: (
        (run / "final.pt").exists() and all(_last_step(run, r) >= steps for r in range(ranks))
    )


def _losses(run: Path, ranks: int) -> Losses:
    """Per rank: step -> loss, the last value written for each step (resumed steps rewrite)."""
    out = []
    for r in range(ranks):
        per: dict[int, float] = {}
        for line in (run / f"rank{r}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            per[rec["step"]] = rec["loss"]
        out.append(per)
    return out


def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    ref_dir, cut_dir = out / "uninterrupted", out / "interrupted"
    for d in (ref_dir, cut_dir):
        d.mkdir(parents=True)
    kills = kill_steps(args)
    if args.kill_at is None:
        print(
            f"SIGKILL after steps {kills}: drawn from --seed {args.seed}, so every run with "
            f"these flags kills at the same steps (another --seed, or --kill-at, for others)",
            flush=True,
        )
    print(
        f"uninterrupted job: {_count(args.ranks, 'rank')} × {_count(args.workers, 'worker')}, "
        f"{args.steps} steps ({EPOCH_STEPS_HINT}: {args.n // (args.batch_size * args.ranks)})",
        flush=True,
    )
    ref_done, cut_done = (_complete(d, args.ranks, args.steps) for d in (ref_dir, cut_dir))
    _wait(_launch(args, ref_dir, args.workers), ref_dir, args.timeout, None, ref_done)
    workers = args.workers
    segments: list[Segment] = []
    for k in kills:
        print(f"interrupted job: {_count(workers, 'worker')}, SIGKILL after step {k}", flush=True)
        logged = _logged(cut_dir)
        _wait(_launch(args, cut_dir, workers), cut_dir, args.timeout, k, skip=logged)
        segments += _segment(cut_dir, logged, workers)
        workers = args.resume_workers if workers == args.workers else args.workers
    print(
        f"resubmitted job: {_count(workers, 'worker')}, from the last checkpoint to the end",
        flush=True,
    )
    logged = _logged(cut_dir)
    _wait(_launch(args, cut_dir, workers), cut_dir, args.timeout, None, cut_done)
    segments += _segment(cut_dir, logged, workers)

    ref, cut = _losses(ref_dir, args.ranks), _losses(cut_dir, args.ranks)
    final_ref = torch.load(ref_dir / "final.pt", weights_only=True)
    final_cut = torch.load(cut_dir / "final.pt", weights_only=True)
    params_equal = all(torch.equal(final_ref[k], final_cut[k]) for k in final_ref)
    return report(args, ref, cut, kills, params_equal, segments)


def kill_steps(args: argparse.Namespace) -> list[int]:
    """Where the time limit strikes: ``--kill-at``, or ``--kills`` steps drawn from ``--seed``
    (keyed "KILL"): the same steps on every run with the same flags."""
    if args.kill_at is not None:
        return sorted(args.kill_at)
    rng = seekdata.numpy_generator(args.seed, 0x4B494C4C)
    points = rng.choice(np.arange(2, args.steps - 1), size=args.kills, replace=False)
    return sorted(int(k) for k in points)


#: one job of the interrupted run: (first step, last step, num_workers)
Segment = tuple[int, int, int]


def _logged(run: Path) -> int:
    """Lines rank 0 has logged so far (a job appends to the log)."""
    path = run / "rank0.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _segment(run: Path, before: int, workers: int) -> list[Segment]:
    """The steps the job that just ended logged after the first ``before`` lines; none when
    it was killed before its first step."""
    lines = (run / "rank0.jsonl").read_text().splitlines()[before:]
    steps = [json.loads(line)["step"] for line in lines]
    return [(min(steps), max(steps), workers)] if steps else []


def report(
    args: argparse.Namespace,
    ref: Losses,
    cut: Losses,
    kills: list[int],
    params_equal: bool,
    segments: list[Segment] | None = None,
) -> dict[str, Any]:
    """Compare the runs' losses, print the table and the verdict, write the summary and the
    plot (when matplotlib is installed) under ``args.out``; returns the summary."""
    out = Path(args.out)
    losses_equal = all(ref[r] == cut[r] for r in range(args.ranks))
    _table(ref, cut, kills)
    summary = {
        "kills": kills,
        "losses_equal": losses_equal,
        "params_equal": params_equal,
        "ranks": args.ranks,
        "workers": args.workers,
        "resume_workers": args.resume_workers,
        "steps": args.steps,
        "segments": [list(segment) for segment in segments or []],
        "losses": {"uninterrupted": ref, "interrupted": cut},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    drawn = _plot(ref, cut, kills, segments or [], out / "losses.png")
    written = [out / "losses.png"] if drawn else []
    written.append(out / "summary.json")
    verdict = "BIT-IDENTICAL" if losses_equal and params_equal else "DIFFERENT"
    print(
        f"\nper-step losses on every rank ({args.ranks}) equal: {losses_equal}; final parameters "
        f"torch.equal: {params_equal} -> {verdict}\n"
        f"wrote {' and '.join(map(str, written))}"
    )
    return summary


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


Losses = list[dict[int, float]]


def _table(ref: Losses, cut: Losses, kills: list[int]) -> None:
    ranks = range(len(ref))
    print(
        f"\n{'step':>4} | "
        + " | ".join(f"rank {r} uninterrupted | rank {r} resumed" for r in ranks)
    )
    for step in sorted(ref[0]):
        mark = "  <- SIGKILL" if step in kills else ""
        cells = " | ".join(
            f"{ref[r][step]:>20.9f} | {cut[r].get(step, float('nan')):>15.9f}" for r in ranks
        )
        same = all(ref[r][step] == cut[r].get(step) for r in ranks)
        print(f"{step:>4} | {cells} {'==' if same else '!='}{mark}")


def _plot(ref: Losses, cut: Losses, kills: list[int], segments: list[Segment], path: Path) -> bool:
    """Draw the losses, and |resumed − uninterrupted| per step, to ``path``; False, saying
    so, when matplotlib is not installed."""
    plt = figures.pyplot()
    if plt is None:
        return False
    fig = figure(ref, cut, kills, segments)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def rerun_steps(segments: list[Segment]) -> list[tuple[int, int]]:
    """The steps run twice: a resubmitted job starts at its last checkpoint, before the step
    where the job before it was killed; ``(first, last)`` for each such overlap."""
    return [(nxt[0], prev[1]) for prev, nxt in itertools.pairwise(segments) if nxt[0] <= prev[1]]


def figure(ref: Losses, cut: Losses, kills: list[int], segments: list[Segment]) -> Any:
    """The demo's plot (a matplotlib figure; the caller saves and closes it)."""
    import matplotlib.pyplot as plt

    fig, (ax, dax) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=(3, 2))
    largest = 0.0
    for r in range(len(ref)):
        steps = sorted(ref[r])
        ref_line = [ref[r][s] for s in steps]
        cut_line = [cut[r].get(s, float("nan")) for s in steps]
        ax.plot(steps, ref_line, lw=3, alpha=0.35, label=f"rank {r} uninterrupted")
        ax.plot(steps, cut_line, lw=1, ls="--", label=f"rank {r} killed + resumed")
        diff = [abs(a - b) for a, b in zip(cut_line, ref_line, strict=True)]
        largest = max([largest, *(d for d in diff if d == d)])
        dax.plot(steps, diff, marker="o", ms=3, lw=1, clip_on=False, label=f"rank {r}")
    for i, k in enumerate(kills):
        for axis in (ax, dax):
            axis.axvline(k, color="red", lw=0.8, alpha=0.6, label="SIGKILL" if i == 0 else None)
    for i, (first, last, workers) in enumerate(segments):  # each job of the resumed run
        label = "one job of the resumed run (its workers above)" if i == 0 else None
        ax.axvspan(first - 0.5, last + 0.5, color=f"C{i % 2 + 7}", alpha=0.08, lw=0, label=label)
        ax.text((first + last) / 2, 1.0, _count(workers, "worker"), ha="center", va="bottom",
                fontsize=7, transform=ax.get_xaxis_transform())  # fmt: skip
    for i, (first, last) in enumerate(rerun_steps(segments)):  # two jobs' bands overlap here
        label = "steps run again: resumed from the checkpoint before the SIGKILL"
        ax.axvspan(first - 0.5, last + 0.5, facecolor="none", edgecolor="0.4", hatch="///",
                   lw=0, label=label if i == 0 else None)  # fmt: skip
    ax.set_ylabel("loss")
    ax.set_title("DDP job killed mid-epoch and resumed vs uninterrupted", pad=14)
    ax.legend(fontsize=7)
    dax.set_yscale("symlog", linthresh=1e-9)  # a zero difference sits on the axis
    dax.set_ylim(bottom=0)
    dax.set_ylabel("|resumed − uninterrupted|")
    dax.set_xlabel("step (red: SIGKILL; shaded: each job of the resumed run; hatched: run again)")
    verdict = "0 at every step: bit-identical" if largest == 0 else f"max {largest:.3g}: differs"
    dax.text(0.5, 0.85, verdict, ha="center", transform=dax.transAxes, fontsize=9)
    dax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    return fig


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m seekdata.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--ranks", type=int, default=2, help="DDP ranks (processes)")
    p.add_argument("--workers", type=int, default=2, help="num_workers of the first job")
    p.add_argument("--resume-workers", type=int, default=1, help="num_workers after a resubmit")
    p.add_argument("--steps", type=int, default=40, help="training steps in all")
    p.add_argument("--kills", type=int, default=2, help="SIGKILL points, drawn at random from "
                   "--seed: the same steps on every run (another --seed for others)")  # fmt: skip
    p.add_argument("--kill-at", type=int, nargs="+", help="explicit SIGKILL steps instead")
    p.add_argument("--n", type=int, default=200, help="dataset size")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--ckpt-every", type=int, default=3, help="checkpoint every k steps")
    p.add_argument("--seed", type=int, default=0, help="keys the data, the model's "
                   "randomness and the --kills steps")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300, help="seconds per job")
    p.add_argument("--out", default="seekdata-demo", help="folder for runs, summary, plot")
    p.add_argument("--elastic", action="store_true", help="torchrun loses a node and gets it "
                   "back instead (python -m seekdata.demo --elastic --help)")  # fmt: skip
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("ranks", "steps", "batch_size", "ckpt_every", "n"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.workers < 0 or args.resume_workers < 0:
        p.error("--workers and --resume-workers must be >= 0")
    if not args.worker and args.kill_at is None and not 0 < args.kills <= max(args.steps - 3, 0):
        p.error(f"--kills must be in [1, steps - 3] = [1, {args.steps - 3}]; got {args.kills}")
    if args.kill_at is not None and any(not 0 < k < args.steps for k in args.kill_at):
        p.error(f"--kill-at steps must lie in (0, {args.steps}); got {args.kill_at}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--elastic" in argv:  # a node lost and back under torchrun: its own module
        from seekdata.tools.demo import elastic

        return elastic.main([a for a in argv if a != "--elastic"])
    args = parse(argv)
    if args.worker:
        _train(argparse.Namespace(**json.loads(os.environ[_CONFIG_ENV])))
        seekdata.exit_ddp()  # a launcher would report gloo's abort at finalization
    summary = run_demo(args)
    return 0 if summary["losses_equal"] and summary["params_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
