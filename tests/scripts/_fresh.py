"""Run a worker script in a fresh single process and read the JSON answer it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.forker import Forker

HERE = Path(__file__).resolve().parent


def fresh_env() -> dict[str, str]:
    """One process with one thread a core, whatever the test runner's environment."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def forker(*modules: str) -> Forker:
    """A server that imported MODULES once (in the environment of ``fresh_env``) and forks a
    process per ``run_fresh(..., forker=)``: each run is a new process whose modules are as
    freshly imported, without paying the import (a minute for transformers on a loaded
    2-core machine)."""
    return Forker(*modules, env=fresh_env())


def run_fresh(worker: str, out: Path, *args: object, forker: Forker | None = None) -> dict:
    """``python tests/<worker> <out> <args...>`` (forked from FORKER when given); fails the test
    with the worker's output."""
    argv = [str(HERE / worker), str(out), *map(str, args)]
    if forker is None:
        done = subprocess.run(
            [sys.executable, *argv], env=fresh_env(), capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return json.loads(out.read_text())
    run = forker.popen(argv)
    try:
        output, _ = run.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        raise
    assert run.returncode == 0, output[-6000:]
    return json.loads(out.read_text())
