"""Start a real gloo job of a few processes on 127.0.0.1 for a test; never leave one behind.

Each rank runs ``python <script> <args...>`` (or is forked from a ``forker()`` that imported
torch once) with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set,
writes its log to ``<tmp>/rank<r>.log`` and its answer as JSON to ``<tmp>/result<r>.json``.
All ranks share one new process group, as the tasks of a SLURM job step do, so that
:meth:`Job.signal_step` reaches every process of the job, DataLoader workers included.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.forker import Forker

HERE = Path(__file__).resolve().parent
TIMEOUT = 90.0  # seconds for a whole job; a hung collective fails the test instead of hanging


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Job:
    def __init__(self, procs: list[Any], tmp: Path) -> None:
        self.procs, self.tmp = procs, tmp
        self.deadline = time.monotonic() + TIMEOUT

    def logs(self) -> str:
        parts = []
        for r in range(len(self.procs)):
            log = self.tmp / f"rank{r}.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            parts.append(f"--- rank {r} (exit {self.procs[r].poll()}) ---\n{text[-4000:]}")
        return "\n".join(parts)

    def wait_for(self, *names: str) -> None:
        """Wait until the files ``names`` exist in tmp, failing if a rank exits or time runs out."""
        while not all((self.tmp / n).exists() for n in names):
            if any(p.poll() is not None for p in self.procs):
                raise AssertionError(f"a rank exited before writing {names}\n{self.logs()}")
            if time.monotonic() > self.deadline:
                raise AssertionError(f"timed out waiting for {names}\n{self.logs()}")
            time.sleep(0.01)

    def signal(self, rank: int, sig: signal.Signals) -> None:
        os.kill(self.procs[rank].pid, sig)

    def signal_step(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every process of the job (ranks and their workers), as SLURM does."""
        os.killpg(self.procs[0].pid, sig)

    def results(self) -> list[dict]:
        """Wait for every rank to exit 0 and return their JSON answers, by rank."""
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"the job did not finish in {TIMEOUT} s\n{self.logs()}"
                ) from None
        if any(p.returncode != 0 for p in self.procs):
            raise AssertionError(f"a rank failed\n{self.logs()}")
        return [
            json.loads((self.tmp / f"result{r}.json").read_text()) for r in range(len(self.procs))
        ]


def _env() -> dict[str, str]:
    """What every rank's environment holds apart from its place in the job."""
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


def forker(*modules: str) -> Forker:
    """A server that imported MODULES once, for ``gloo_job(..., forker=)``: each rank is then a
    process forked from it, in the job's process group, with the rank's environment, instead of a
    python that imports torch (and a framework) again."""
    return Forker(*modules, env=_env())


@contextmanager
def gloo_job(
    script: str, tmp: Path, *args: str, world: int = 2, forker: Forker | None = None
) -> Iterator[Job]:
    env = {
        **_env(),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world),
    }
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own sockets on loopback too
    procs: list[Any] = []  # subprocess.Popen, or forker.Run: the same calls
    try:
        for r in range(world):
            rank_env = {**env, "RANK": str(r), "LOCAL_RANK": str(r)}
            argv = [str(HERE / script), str(tmp), *args]
            group = procs[0].pid if procs else 0
            with open(tmp / f"rank{r}.log", "wb") as log:
                if forker is not None:
                    procs.append(forker.popen(argv, env=rank_env, group=group, output=log.fileno()))
                    continue
                procs.append(
                    subprocess.Popen(
                        [sys.executable, *argv],
                        env=rank_env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        process_group=group,
                    )
                )
        yield Job(procs, tmp)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
        if procs:  # workers a killed rank left behind: the group holds only this job's processes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(procs[0].pid, signal.SIGKILL)
