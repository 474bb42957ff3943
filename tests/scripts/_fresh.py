"""Run a worker script in a fresh single process and read the JSON answer it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_fresh(worker: str, out: Path, *args: object) -> dict:
    """``python tests/<worker> <out> <args...>``; fails the test with the worker's output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # one process, whatever the test runner's environment
    done = subprocess.run(
        [sys.executable, str(HERE / worker), str(out), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())
