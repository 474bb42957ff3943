"""Run tests/scripts/_exit_script.py, as a child forked after ``import torch`` or afresh, and
check how it ended: for tests/loader/test_exit.py (process workers) and test_exit_threads.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import seekdata
from tests.helpers.forker import Forker, Run
from tests.helpers.paths import SCRIPTS

SCRIPT = SCRIPTS / "_exit_script.py"
BOUND = 60.0  # seconds: a script that ends takes ~2; one that hangs never ends

# HOW -> the status Python (and torch's DataLoader) gives it
STATUS = {"end": 0, "live": 0, "break": 0, "raise": 1, "exit": 3, "sigint": -signal.SIGINT}
# worker_method="thread": the same statuses, and a SIGTERM
THREAD_STATUS = {**STATUS, "sigterm": -signal.SIGTERM}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:\tZ") for line in f)
    except FileNotFoundError:
        return False


def env() -> dict[str, str]:
    """The environment with the seekdata this test imported (a checkout's src/, or the installed
    one) first on the path."""
    path = [str(Path(seekdata.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def exit_forker() -> Forker:
    """One interpreter with torch and seekdata imported, forking a process per case."""
    return Forker("torch", "seekdata", "seekdata.loader", env=env())


def run_script(
    forker: Forker | None, *args: str, interrupt: str | None = None
) -> tuple[int, str, set[int]]:
    """Run the script to its end within BOUND, forked from FORKER (None: a fresh interpreter);
    (status, output, pids of every loading process)."""
    if forker is not None:  # its own session, as below
        proc: subprocess.Popen[str] | Run = forker.popen([str(SCRIPT), *args])
    else:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
            start_new_session=True,  # its own process group, as a shell job is
        )
    lines: list[str] = []
    try:
        if interrupt is not None:
            assert proc.stdout is not None
            for line in proc.stdout:  # wait until it iterates: the signal is not timed
                lines.append(line)
                if line.startswith("iterating"):
                    break
            if interrupt == "term":  # a preemption notice (SLURM's SIGTERM)
                os.kill(proc.pid, signal.SIGTERM)
            elif interrupt == "group":  # Ctrl-C in a terminal: the whole foreground group
                os.killpg(proc.pid, signal.SIGINT)
            else:  # kill -INT of the main process alone
                os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"{args}: still running after {BOUND:.0f} s\n{''.join(lines)}{out}"
        ) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(lines) + out
    pids = {
        int(p) for line in text.splitlines() if line.startswith("pids") for p in line.split()[1:]
    }
    return proc.returncode, text, pids - {proc.pid}


def check_ended(args: tuple[str, ...], status: int, text: str, workers: set[int]) -> None:
    how = args[4]
    assert status == THREAD_STATUS[how], (
        f"{args}: status {status}, expected {THREAD_STATUS[how]}\n{text}"
    )
    if how in ("end", "live", "break"):
        assert text.rstrip().endswith("end"), text
    assert "killed by signal" not in text and "Exception ignored" not in text, text
    deadline = time.monotonic() + BOUND  # a worker orphaned by its parent's end goes on its own
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers), f"{args}: workers left behind\n{text}"


def check_threads(args: tuple[str, ...], status: int, text: str, pids: set[int]) -> None:
    assert not pids, f"{args}: thread workers load in this process only\n{text}"
    assert "threads 2" in text, text  # two worker threads were alive while it iterated
    check_ended(args, status, text, pids)
