"""The child process of ``seekdata verify`` (:mod:`seekdata.tools.verify`): builds the user's
loader from its factory and runs the training-loop stand-in, :func:`seekdata.testing.run_loop`,
uninterrupted (saving every batch and state) or resumed from one saved state (comparing every
batch with the uninterrupted run's).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class _ProtocolError(Exception):
    """The factory or loader does not follow the protocol; the message says what to fix."""


def main(job_path: str) -> int:
    """:func:`child`, ended with :func:`seekdata.exit_ddp` when FACTORY started a process
    group: a normal exit could then abort after the results are written (pytorch#190489)."""
    status = child(job_path)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        from seekdata.training import exit_ddp

        exit_ddp(status)
    return status


def child(job_path: str) -> int:
    """Entry point of a child process: 0 done, 2 protocol error (error.txt), else a crash."""
    job = json.loads(Path(job_path).read_text())
    tmp = Path(job["dir"])
    try:
        loader, step_fn = _build(_load_factory(job["spec"], job["cwd"]), job["kwargs"])
        (_reference if job["mode"] == "reference" else _resume)(job, tmp, loader, step_fn)
    except _ProtocolError as exc:
        (tmp / "error.txt").write_text(str(exc))
        return 2
    return 0


def _load_factory(spec: str, cwd: str) -> Callable[..., Any]:
    module_name, _, attr = spec.rpartition(":")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        path = (Path(cwd) / module_name).resolve()
        if not path.is_file():
            raise _ProtocolError(f"MODULE must be a module or a .py file; {path} does not exist")
        sys.path.insert(0, str(path.parent))  # imported by name, so that workers can unpickle
        module = importlib.import_module(path.stem)
        found = Path(getattr(module, "__file__", "") or "").resolve()
        if found != path:
            raise _ProtocolError(
                f"{path} must be importable as {path.stem!r}, but that name is {found}; "
                f"rename the file or pass MODULE:FACTORY"
            )
    else:
        sys.path.insert(0, cwd)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name and not module_name.startswith(f"{exc.name}."):
                raise  # the user's module imports something missing: show its traceback
            raise _ProtocolError(
                f"MODULE must be importable from {cwd}; no module named {exc.name!r}; run from "
                f"the folder that holds it, or pass path/to/file.py:{attr}"
            ) from None
    try:
        obj = functools.reduce(getattr, attr.split("."), module)
    except AttributeError:
        names = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
        raise _ProtocolError(
            f"{spec}: {module.__name__} must define {attr!r}; it does not (its functions and "
            f"classes: {', '.join(names[:20]) or 'none'}); pass one of them"
        ) from None
    if not callable(obj):
        raise _ProtocolError(f"{spec} must be a function; got {type(obj).__name__}")
    return obj


def _build(factory: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    made = factory(**kwargs)
    loader, step_fn = made if isinstance(made, tuple) and len(made) == 2 else (made, None)
    missing = [m for m in ("__iter__", "state_dict", "load_state_dict") if not hasattr(loader, m)]
    if missing or (step_fn is not None and not callable(step_fn)):
        what = f"a {type(loader).__name__} without {', '.join(missing)}" if missing else ""
        what = what or f"a pair whose second item is a {type(step_fn).__name__}"
        raise _ProtocolError(
            f"FACTORY must return a loader with __iter__, state_dict and load_state_dict, or "
            f"(loader, step_fn) with step_fn(batch, step) callable; it returned {what}; "
            f"return e.g. a seekdata.StatefulDataLoader"
        )
    return loader, step_fn


def _loop(
    loader: Any, job: dict[str, Any], start: dict[str, Any], on_batch: Callable[..., bool]
) -> int:
    """:func:`seekdata.testing.run_loop` from the counters in ``start`` (epoch, in_epoch,
    steps), ``job``'s epochs and per-epoch limit. Returns the steps done."""
    from seekdata.testing import run_loop

    return run_loop(
        loader,
        range(start["epoch"], job["epochs"]),
        on_batch,
        set_epoch=hasattr(loader, "set_epoch"),
        limit=job["limit"],
        in_epoch=start["in_epoch"],
        steps=start["steps"],
    )


def _state(loader: Any) -> Any:
    state = loader.state_dict()
    try:
        return json.loads(json.dumps(state))
    except (TypeError, ValueError) as exc:
        raise _ProtocolError(
            f"state_dict() must return JSON-native values (dict, list, str, int, float, bool, "
            f"None); it returned {str(state)[:200]} ({exc}); keep counters in the state, not "
            f"tensors or generator bytes"
        ) from exc


def _reference(job: dict[str, Any], tmp: Path, loader: Any, step_fn: Any) -> None:
    import torch

    (tmp / "ref").mkdir()
    epoch_steps = [0] * job["epochs"]
    with open(tmp / "states.jsonl", "w") as states:

        def on_batch(batch: Any, epoch: int, k: int, step: int) -> bool:
            if batch is not None:
                out = step_fn(batch, step - 1) if step_fn is not None else None
                torch.save({"batch": batch, "out": out}, tmp / "ref" / f"{step - 1}.pt")
                epoch_steps[epoch] = k
            record = {"epoch": epoch, "in_epoch": k, "steps": step, "after_loop": batch is None}
            states.write(json.dumps({**record, "state": _state(loader)}) + "\n")
            return False

        _loop(loader, job, {"epoch": 0, "in_epoch": 0, "steps": 0}, on_batch)
    meta = {"epoch_steps": epoch_steps, "step_fn": step_fn is not None}
    (tmp / "meta.json").write_text(json.dumps(meta))


def _resume(job: dict[str, Any], tmp: Path, loader: Any, step_fn: Any) -> None:
    import torch

    from seekdata.testing import first_difference

    record = json.loads(Path(job["stop"]).read_text())
    result: dict[str, Any] = {"difference": None, "step": None}
    try:
        loader.load_state_dict(record["state"])
    except Exception as exc:  # a finding, not a crash: the state cannot be resumed from
        result["difference"] = f"load_state_dict raised {type(exc).__name__}: {exc}"
        (tmp / "result.json").write_text(json.dumps(result))
        return
    total = sum(json.loads((tmp / "meta.json").read_text())["epoch_steps"])

    def on_batch(batch: Any, epoch: int, k: int, step: int) -> bool:
        index, found = step - 1, None
        if batch is None:
            return False
        if index >= total:
            found = f"the resumed run yields step {index}, the uninterrupted run ends at {total}"
        else:
            # Our own file, written by the uninterrupted run of the same user code, in a private
            # temporary folder: unpickling it runs nothing the factory did not already run.
            want = torch.load(tmp / "ref" / f"{index}.pt", weights_only=False)
            out = step_fn(batch, index) if step_fn is not None else None
            found = first_difference(want["batch"], batch, "batch") or first_difference(
                want["out"], out, "step_fn(batch, step)"
            )
        if found:
            result.update(difference=found, step=index)
        return found is not None

    steps = _loop(loader, job, record, on_batch)
    if result["difference"] is None and steps < total:
        result.update(step=steps, difference=f"it ends after {steps} steps, not {total}")
    (tmp / "result.json").write_text(json.dumps(result))
