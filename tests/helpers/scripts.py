"""Run a script of benchmarks/ as a user would, and return what it printed."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
from filelock import FileLock  # torch's own dependency

from tests.helpers.forker import Forker

ROOT = pathlib.Path(__file__).resolve().parents[2]


def script(name: str, *argv: str, forker: Forker | None = None) -> str:
    """Its stdout; forked from FORKER (an interpreter that imported torch and seekdata
    already), its stdout and stderr together."""
    path = str(ROOT / "benchmarks" / name)
    if forker is not None:
        run = forker.popen([path, *argv])
        try:
            printed, _ = run.communicate(timeout=300)
        finally:
            run.kill()  # only if a hang timed out: it has ended otherwise
        assert run.returncode == 0, printed[-3000:]
        return printed
    done = subprocess.run(
        [sys.executable, path, *argv], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def script_once(factory: pytest.TempPathFactory, name: str, *argv: str) -> tuple[pathlib.Path, str]:
    """``script(name, *argv)`` run once per test session, however many tests (in however many
    pytest-xdist processes) ask for the same run: each reads its own keys from the one output.
    ``{dir}`` in ``argv`` is the run's folder. Returns that folder and what the script printed;
    a failed run is not kept, so each test that asks fails with the script's error."""
    root = factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:  # the workers' folders share this parent
        root = root.parent
    key = hashlib.sha256(json.dumps([name, *argv]).encode()).hexdigest()[:16]
    folder = root / f"script-{pathlib.Path(name).stem}-{key}"
    printed = folder / "printed.txt"
    with FileLock(f"{folder}.lock"):
        if not printed.exists():
            folder.mkdir(exist_ok=True)
            text = script(name, *(a.replace("{dir}", str(folder)) for a in argv))
            printed.write_text(text)
    return folder, printed.read_text()


#: benchmarks/mixture.py's schedule and changes tables, read by a test of each
MIXTURE_SCHEDULE_RUN = ("mixture.py", "--only-schedule", "--quick", "--out", "{dir}/m.json")
