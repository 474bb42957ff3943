"""Fault injection: a real 2-rank torchrun job (gloo, 127.0.0.1) SIGKILLed at 3 random steps
and resubmitted each time ends bit-identical to the uninterrupted job."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seekdata.tools import demo


def test_sigkill_three_times_and_resume_is_bit_identical(tmp_path) -> None:
    args = demo.parse(
        [
            "--ranks",
            "2",
            "--workers",
            "1",
            "--resume-workers",
            "0",
            "--steps",
            "14",
            "--kills",
            "3",
            "--n",
            "48",
            "--batch-size",
            "8",
            "--ckpt-every",
            "2",
            "--seed",
            "3",
            "--out",
            str(tmp_path / "demo"),
            "--timeout",
            "240",
        ]
    )
    summary = demo.run_demo(args)
    assert len(summary["kills"]) == 3
    assert summary["params_equal"] and summary["losses_equal"]
    saved = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert len(saved["losses"]["interrupted"]) == 2  # both ranks compared, every step
    assert all(len(per) == 14 for per in saved["losses"]["uninterrupted"])
    assert (tmp_path / "demo" / "losses.png").stat().st_size > 0


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--steps", "5", "--kills", "9"], "--kills must be in"),
        (["--kill-at", "50"], "--kill-at steps must lie in"),
    ],
)
def test_bad_flags(argv, match, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        demo.parse(argv)
    assert exit_.value.code == 2 and match in capsys.readouterr().err


def test_the_readme_command_still_runs_the_demo() -> None:
    """``python -m seekdata.demo`` (the README's one command) reaches tools/demo.py, whose
    torchrun workers start ``-m seekdata.tools.demo``."""
    out = subprocess.run(
        [sys.executable, "-m", "seekdata.demo", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m seekdata.demo")
