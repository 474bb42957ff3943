"""ruff and mypy run clean on src/ as part of the test command."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    out = run(sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout + out.stderr
    out = run(sys.executable, "-m", "ruff", "format", "--check", "src")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_clean() -> None:
    out = run(sys.executable, "-m", "mypy")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert len(ci) == 1 and ci[0] in readme
    assert ci[0].startswith("pip install torch==2.13.0")


def test_the_longest_files_started_first_exist() -> None:
    """tests/conftest.py's LONGEST_FIRST names files that exist (a renamed one would lose its
    place at the front of the queue without a word)."""
    from tests.conftest import LONGEST_FIRST

    root = pathlib.Path(__file__).resolve().parents[1]
    assert [name for name in LONGEST_FIRST if not (root / name).is_file()] == []
