"""``seekdata verify``: prove, in fresh processes, that a user's loader resumes exactly.

``FACTORY(**kwargs)``, imported from ``pkg.mod:FACTORY`` or ``path/to/file.py:FACTORY``,
returns a loader (iterable, with ``state_dict()`` of JSON-native values and
``load_state_dict``; ``set_epoch(epoch)`` is called when it has one) or ``(loader, step_fn)``
where ``step_fn(batch, step)`` is a model step whose outputs are compared too. ``kwargs`` is
empty except in resumed runs with ``--resume-workers N``: ``num_workers=N``.

One fresh process runs the loop uninterrupted, saving every batch (``torch.save``) and the
state after every batch and every epoch's loop, as a trainer that checkpoints there would.
For each stop point (the end of epoch 0, its last batch, random steps drawn with
``seekdata.numpy_generator``) another fresh process builds a loader, loads that state from
JSON with the loop counters a trainer saves (epoch, batches of the epoch, global step), runs
the rest and compares every batch bit for bit. docs/cli.md has the details.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seekdata.tools import _command
from seekdata.tools._verify_child import child as _child  # noqa: F401  # the child entry

__all__ = ["add_parser", "main", "run"]

_STOPS_TAG = 0x53544F50  # "STOP": key of the generator that draws the stop points
_CHILD = "import sys; from seekdata.tools._verify_child import main; sys.exit(main(sys.argv[1]))"
_CAUSES = (
    "common causes: randomness outside seekdata's counters (a RandomState or Generator made "
    "in __init__, a seed from time or the pid), state kept in the dataset or collate_fn, or a "
    "step_fn whose randomness is not keyed by the step"
)
_RESUME_WORKERS = (
    "build the resumed loaders with FACTORY(num_workers=N): the factory must accept that "
    "keyword (the uninterrupted run calls FACTORY())"
)
#: (option, type, default, least value, metavar, help)
_OPTIONS: tuple[tuple[str, type, Any, int, str, str], ...] = (
    ("--epochs", int, 2, 1, "N", "epochs to run (default 2)"),
    ("--stops", int, 5, 1, "N", "stop points to resume from (default 5)"),
    ("--seed", int, 0, 0, "N", "seed of the random stop points (default 0)"),
    ("--resume-workers", int, None, 0, "N", _RESUME_WORKERS),
    ("--steps-per-epoch-limit", int, None, 1, "N", "end each epoch's loop after N batches"),
    ("--timeout", float, 600.0, 0, "S", "seconds each process may run (default 600)"),
)


def add_parser(subparsers: Any) -> None:
    """Register ``verify`` on the ``seekdata`` command's subparsers."""
    parser = subparsers.add_parser(
        "verify",
        help="check in fresh processes that a loader resumes exactly",
        description=(
            "Run FACTORY's loader uninterrupted and resumed from its JSON state at several "
            "stop points, each run in a fresh process, and compare every batch bit for bit. "
            "FACTORY() returns a loader (iterable, with state_dict() of JSON-native values and "
            "load_state_dict(state); set_epoch(epoch) is called when it has one) or a pair "
            "(loader, step_fn) with step_fn(batch, step) a model step whose outputs are "
            "compared too. With --resume-workers N the resumed runs call "
            "FACTORY(num_workers=N), so the factory must accept a num_workers keyword, e.g. "
            "def make_loader(num_workers=0). "
            "Exit 0 on a pass, 1 on a divergence, 2 on errors (docs/cli.md)."
        ),
    )
    _arguments(parser)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "factory",
        metavar="MODULE:FACTORY",
        help="the function that builds the loader: 'pkg.mod:make' or 'path/to/file.py:make'; "
        "called FACTORY(), or FACTORY(num_workers=N) under --resume-workers N",
    )
    for option, kind, default, _, metavar, text in _OPTIONS:
        parser.add_argument(option, type=kind, default=default, metavar=metavar, help=text)
    parser.set_defaults(run=run)


def _check_args(args: argparse.Namespace) -> None:
    module, _, name = args.factory.rpartition(":")
    if not module or not name:
        raise ValueError(
            f"FACTORY must be MODULE:FUNCTION, e.g. 'train_data:make_loader' or "
            f"'path/to/file.py:make_loader'; got {args.factory!r}"
        )
    for option, _, _, least, _, _ in _OPTIONS:
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None and (value < least or (option == "--timeout" and value <= 0)):
            more = "more than" if option == "--timeout" else "at least"
            raise ValueError(f"{option} must be {more} {least}; got {value}; pass a larger one")


def run(args: argparse.Namespace) -> int:
    """Run ``seekdata verify``: 0 when every stop point resumes exactly, 1 on a divergence."""
    _check_args(args)
    workers = args.resume_workers
    with_workers = "" if workers is None else f", resumed with num_workers={workers}"
    _progress(f"{args.factory}: {args.epochs} epoch(s), {args.stops} stop point(s){with_workers}")
    tmp = Path(tempfile.mkdtemp(prefix="seekdata-verify-"))
    try:
        job = {"spec": args.factory, "cwd": os.getcwd(), "dir": str(tmp), "epochs": args.epochs}
        job["limit"] = args.steps_per_epoch_limit
        start = time.monotonic()
        reference = {**job, "mode": "reference", "kwargs": {}}
        _launch(reference, "the uninterrupted run", args.timeout, "meta.json")
        meta = json.loads((tmp / "meta.json").read_text())
        epoch_steps: list[int] = meta["epoch_steps"]
        total = sum(epoch_steps)
        if total == 0:
            raise ValueError(
                f"the loader must yield batches to be checked; {args.factory} yielded none in "
                f"{args.epochs} epoch(s); pass a factory whose dataset is not empty"
            )
        took = time.monotonic() - start
        split = " + ".join(map(str, epoch_steps))
        _progress(f"uninterrupted run: {total} steps ({split}), {took:.1f} s")
        records = [json.loads(line) for line in (tmp / "states.jsonl").read_text().splitlines()]
        stops = _choose(records, total, args.stops, args.seed)
        labels = [_label(record, epoch_steps) for record in stops]
        _progress("stop points: " + "; ".join(labels))
        kwargs = {} if workers is None else {"num_workers": workers}
        hint = "" if workers is None else f" (FACTORY must accept num_workers={workers})"
        for i, (record, label) in enumerate(zip(stops, labels, strict=True), 1):
            (tmp / "stop.json").write_text(json.dumps(record))
            start = time.monotonic()
            resume = {**job, "mode": "resume", "kwargs": kwargs, "stop": str(tmp / "stop.json")}
            _launch(resume, f"the run resumed {label}{hint}", args.timeout, "result.json")
            result = json.loads((tmp / "result.json").read_text())
            step, difference = result["step"], result["difference"]
            took = time.monotonic() - start
            verdict = "DIVERGES" if difference else "exact"
            _progress(f"[{i}/{len(stops)}] resumed {label}: {verdict}, {took:.1f} s")
            if difference:
                at = f"at step {step}{_in_epoch(step, epoch_steps)}" if step is not None else ""
                how = f"diverges from the uninterrupted run {at}" if at else "cannot load its state"
                print(
                    f"seekdata verify: FAIL: the run resumed {label} {how}: {difference}\n"
                    f"  the state it resumed from: {json.dumps(record['state'])}\n  {_CAUSES}"
                )
                return 1
        outputs = "batch and step_fn output" if meta["step_fn"] else "batch"
        print(
            f"seekdata verify: PASS: {args.factory} resumed exactly at {len(stops)} stop "
            f"point(s): {'; '.join(labels)}. Every {outputs} of the {total}-step run matched "
            f"bit for bit."
        )
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _choose(records: list[dict[str, Any]], total: int, count: int, seed: int) -> list[Any]:
    """End of epoch 0, its last batch, then random steps (seekdata.numpy_generator(seed))."""
    from seekdata._core.streams import numpy_generator

    end0 = next(r for r in records if r["after_loop"])
    last0 = next((r for r in records if not r["after_loop"] and r["steps"] == end0["steps"]), None)
    forced = [r for r in (end0, last0) if r is not None][:count]
    rest = [r for r in records if not r["after_loop"] and r is not last0 and r["steps"] < total]
    k = min(count - len(forced), len(rest))
    picks = numpy_generator(seed, _STOPS_TAG).choice(len(rest), size=k, replace=False)
    chosen = forced + [rest[int(j)] for j in picks]
    return sorted(chosen, key=lambda r: (r["steps"], r["after_loop"]))


def _in_epoch(step: int, epoch_steps: Sequence[int]) -> str:
    """' (epoch e, batch k)' for a global step index."""
    for epoch, steps in enumerate(epoch_steps):
        if step < steps:
            return f" (epoch {epoch}, batch {step})"
        step -= steps
    return " (past the uninterrupted run's end)"


def _label(record: dict[str, Any], epoch_steps: Sequence[int]) -> str:
    """Where a stop point is; steps and batches count from 0, as step_fn's ``step`` does."""
    epoch, k = record["epoch"], record["in_epoch"]
    if record["after_loop"]:
        return f"at the end of epoch {epoch - 1} (after its loop)"
    last = ", its last" if k == epoch_steps[epoch] else ""
    return f"after step {record['steps'] - 1} (epoch {epoch}, batch {k - 1}{last})"


def _progress(line: str) -> None:
    print(f"seekdata verify: {line}", file=sys.stderr, flush=True)


def _launch(job: dict[str, Any], what: str, timeout: float, results: str) -> None:
    """Run one child process on ``job``; raise ValueError when it fails or times out.

    A child killed by SIGABRT after it wrote ``results`` (its last act) is torch's gloo abort
    at interpreter shutdown, not a finding: it is said as such, and its results are used."""
    tmp = Path(job["dir"])
    (tmp / "job.json").write_text(json.dumps(job))
    for stale in ("error.txt", "result.json"):
        (tmp / stale).unlink(missing_ok=True)
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[1])  # the folder this seekdata is imported from
    if here not in (*site.getsitepackages(), site.getusersitepackages()):  # a source checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    with open(tmp / "log.txt", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp / "job.json")],
            cwd=job["cwd"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout ends its workers too
        )
        try:
            status = proc.wait(timeout)
        except BaseException as exc:  # the timeout, or Ctrl-C: leave no process behind
            with contextlib.suppress(ProcessLookupError):
                if hasattr(os, "killpg"):
                    os.killpg(proc.pid, signal.SIGKILL)  # the group we started, not yet reaped
                else:  # pragma: no cover - Windows has no process groups
                    proc.kill()
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise ValueError(
                    f"{what} must finish within --timeout {timeout:g} s; it did not and was "
                    f"stopped; pass a larger --timeout, or --steps-per-epoch-limit to shorten "
                    f"the epochs"
                ) from None
            raise
    if status == -signal.SIGABRT and (tmp / results).exists():
        _progress(
            f"note: {what} was killed by SIGABRT at interpreter shutdown, after it wrote all "
            f"its results: torch's gloo threads (pytorch/pytorch#190489) when FACTORY starts "
            f"a process group, not the data; its results are used"
        )
        return
    if status != 0:
        if (tmp / "error.txt").exists():
            raise ValueError(f"{what}: {(tmp / 'error.txt').read_text()}")
        tail = (tmp / "log.txt").read_bytes()[-3000:].decode(errors="replace").rstrip()
        raise ValueError(
            f"{what} must finish; it exited with status {status}; fix the error its output "
            f"ends with:\n{tail}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m seekdata.tools.verify ...``: the same as ``seekdata verify ...``."""
    return _command.main_of("verify", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
