"""benchmarks/threads_gpu.py runs its measuring code on the CPU (``--device cpu``), so the
script is known to run before a GPU machine runs it unchanged."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from tests.helpers.paths import ROOT


def test_the_dry_run_on_the_cpu_measures_every_loader_and_says_it_is_a_dry_run(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "g.json"
    argv = ["--device", "cpu", "--quick", "--workers", "2", "--images", "64", "--batch", "16",
            "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "threads_gpu.py"), *argv],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["dry_run"] is True and payload["device"] == "cpu"
    rows = {r["loader"]: r for r in payload["rows"]}
    assert set(rows) == {"seekdata threads", "seekdata processes", "torch DataLoader"}
    assert all(r["samples_per_s"] > 0 and r["workers"] == 2 for r in rows.values())
    assert rows["seekdata processes"]["vs_processes"] == 1.0
