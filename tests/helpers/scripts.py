"""Run a script of benchmarks/ as a user would, and return what it printed."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def script(name: str, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *argv],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
