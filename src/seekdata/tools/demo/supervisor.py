"""The demos' one torchrun supervisor: start a torchrun, and kill it as a cluster's time limit does.

Both demos (:mod:`seekdata.tools.demo.preempted`, :mod:`seekdata.tools.demo.elastic`) start
every torchrun with :func:`start` and end every one with :func:`kill`; neither sends a signal
itself. There is one kill rule, that of a cluster ending a job at its time limit or losing a
node: SIGKILL, no warning, no cleanup, to every process of the job.

torchrun starts each rank in a session (and process group) of its own, so killing torchrun's
process group alone leaves the ranks training on, writing logs and checkpoints beside the job
that replaces them. :func:`kill` therefore stops torchrun first (SIGSTOP: it restarts no rank
while the ranks are found), finds every process under it (Linux's /proc; elsewhere psutil where
installed), SIGKILLs the process group of each (a rank's group holds its DataLoader workers),
then torchrun's own group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["descendants", "kill", "start"]


def start(cmd: Sequence[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` (a torchrun) in a session of its own, its output appended to ``log``."""
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            list(cmd), env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole job started by :func:`start`: torchrun stopped first, then the process
    group of every process under it, then torchrun's group; returns once torchrun is reaped.
    A job that already ended is reaped, and whatever of its group is left is killed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGSTOP)
    groups: set[int] = set()
    for pid in descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for group in [*sorted(groups - {proc.pid}), proc.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    proc.wait()


def descendants(root: int) -> list[int]:
    """The processes under ``root`` (Linux's /proc; elsewhere psutil where installed, else
    none: there torchrun's group alone is killed)."""
    parents: dict[int, list[int]] = {}
    proc_dir = Path("/proc")
    if proc_dir.is_dir():
        for entry in proc_dir.iterdir():
            if not entry.name.isdigit():
                continue
            try:  # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
            parents.setdefault(ppid, []).append(int(entry.name))
    else:  # pragma: no cover - no /proc (macOS)
        try:
            import psutil

            return [p.pid for p in psutil.Process(root).children(recursive=True)]
        except Exception:
            return []
    found: list[int] = []
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
