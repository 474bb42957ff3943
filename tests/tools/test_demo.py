"""Fault injection: a real 2-rank torchrun job (gloo, 127.0.0.1) SIGKILLed at 3 random steps
and resubmitted each time ends bit-identical to the uninterrupted job."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from seekdata.tools.demo import preempted
from tests.helpers.paths import ROOT


def test_sigkill_three_times_and_resume_is_bit_identical(tmp_path, capsys) -> None:
    args = preempted.parse(
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
    summary = preempted.run_demo(args)
    assert len(summary["kills"]) == 3
    assert summary["params_equal"] and summary["losses_equal"]
    saved = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert len(saved["losses"]["interrupted"]) == 2  # both ranks compared, every step
    assert all(len(per) == 14 for per in saved["losses"]["uninterrupted"])
    assert (tmp_path / "demo" / "losses.png").stat().st_size > 0
    # each job of the resumed run: the steps it logged and its workers, for the plot's labels
    segments = saved["segments"]
    assert segments[0][0] == 1 and segments[0][2] == 1 and segments[-1][1] == 14, segments
    for (_, last, workers), (first, _, then) in itertools.pairwise(segments):
        # resumed from a checkpoint; a job killed before its first step logged nothing
        assert first <= last + 1 and {workers, then} <= {0, 1}
    printed = capsys.readouterr().out
    assert "2 ranks × 1 worker," in printed and "interrupted job: 1 worker, SIGKILL" in printed
    assert "interrupted job: 0 workers, SIGKILL" in printed and "1 workers" not in printed


def _job_processes(run: Path) -> list[int]:
    """Processes whose demo configuration names ``run`` (ranks and their DataLoader workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if str(run).encode() in environ and b"SEEKDATA_DEMO_CONFIG" in environ:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the job's processes")
def test_a_sigkill_at_the_time_limit_leaves_no_rank_running(tmp_path) -> None:
    """torchrun starts each rank in a session of its own: killing torchrun's process group
    alone left the ranks training on beside the resubmitted job. The kill ends them all."""
    run = tmp_path / "job"
    run.mkdir()
    argv = ["--ranks", "2", "--workers", "1", "--steps", "100000", "--n", "48"]
    args = preempted.parse(
        [*argv, "--batch-size", "8", "--ckpt-every", "1000", "--out", str(tmp_path)]
    )
    try:
        killed = preempted._wait(preempted._launch(args, run, 1), run, 240, 2)
        assert not killed  # it was killed at step 2, long before its end
        assert _job_processes(run) == []
    finally:
        for pid in _job_processes(run):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


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
        preempted.parse(argv)
    assert exit_.value.code == 2 and match in capsys.readouterr().err


def test_the_readme_command_still_runs_the_demo() -> None:
    """``python -m seekdata.demo`` (the README's one command) reaches tools/demo/preempted.py,
    whose torchrun workers start ``-m seekdata.tools.demo.preempted``."""
    out = subprocess.run(
        [sys.executable, "-m", "seekdata.demo", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m seekdata.demo")


def test_the_elastic_demo_is_one_flag_away() -> None:
    """``python -m seekdata.demo --elastic`` reaches tools/demo/elastic.py (its run is tested in
    tests/tools/test_elastic_torchrun.py)."""
    out = subprocess.run(
        [sys.executable, "-m", "seekdata.demo", "--elastic", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m seekdata.demo --elastic")


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--kill-at", "12", "--back-at", "11"], "need 0 < --kill-at < --back-at < --steps"),
        (["--global-batch", "18"], "--global-batch must be a positive multiple of 4"),
    ],
)
def test_bad_elastic_flags(argv, match, capsys) -> None:
    from seekdata.tools.demo import elastic

    with pytest.raises(SystemExit) as exit_:
        elastic.parse(argv)
    assert exit_.value.code == 2 and match in capsys.readouterr().err


def _report(out: Path) -> dict:
    """The demo's last step, on made-up losses of two ranks (no job is run)."""
    args = preempted.parse(["--out", str(out), "--ranks", "2", "--steps", "4", "--kills", "1"])
    out.mkdir()
    ref = [{1: 0.5, 2: 0.25, 3: 0.125, 4: 0.0625}, {1: 0.4, 2: 0.2, 3: 0.1, 4: 0.05}]
    cut = [dict(per) for per in ref]
    return preempted.report(args, ref, cut, [2], params_equal=True)


def test_the_report_writes_and_names_the_plot(tmp_path, capsys) -> None:
    assert _report(tmp_path / "demo")["losses_equal"] is True
    last = capsys.readouterr().out.splitlines()[-1]
    png, summary = tmp_path / "demo" / "losses.png", tmp_path / "demo" / "summary.json"
    assert last == f"wrote {png} and {summary}"
    assert png.read_bytes()[:4] == b"\x89PNG" and summary.exists()


def test_without_matplotlib_the_report_says_no_plot_and_does_not_claim_one(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # ``import matplotlib`` fails
    _report(tmp_path / "demo")
    printed = capsys.readouterr().out
    assert "no plot: matplotlib is not installed (pip install -e '.[demo]' in a clone" in printed
    assert printed.splitlines()[-1] == f"wrote {tmp_path / 'demo' / 'summary.json'}"
    assert "losses.png" not in printed and not (tmp_path / "demo" / "losses.png").exists()


def test_the_demo_output_folder_is_ignored_by_git() -> None:
    """``python -m seekdata.demo`` run from a checkout leaves nothing for ``git status``."""
    root = ROOT
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    out = preempted.parse([]).out
    for name in ("losses.png", "summary.json", "interrupted/rank0.jsonl"):
        ignored = subprocess.run(
            ["git", "check-ignore", "--no-index", "-q", f"{out}/{name}"], cwd=root, timeout=60
        )
        assert ignored.returncode == 0, f"{out}/{name} is not in .gitignore"


def _finished_job(run: Path, log: str) -> subprocess.Popen[bytes]:
    """A job that exited 1 after writing ``log`` as torchrun's output."""
    run.mkdir()
    (run / "torchrun.log").write_text(log)
    return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"], start_new_session=True)


_ABORTED = "terminate called without an active exception\n  exitcode  : -6 (pid: 7)  (SIGABRT)\n"


def test_a_sigabrt_after_the_results_are_written_is_not_reported_as_a_failure(
    tmp_path, capsys
) -> None:
    """torch's gloo abort at shutdown (pytorch#190489) kills a rank after its last line; the
    demo says so, distinctly, and goes on to compare the data."""
    run = tmp_path / "job"
    proc = _finished_job(run, _ABORTED)
    for rank in range(2):
        (run / f"rank{rank}.jsonl").write_text('{"step": 4, "epoch": 0, "loss": 1.0}\n')
    (run / "final.pt").write_bytes(b"")
    assert preempted._wait(proc, run, 60, None, preempted._complete(run, 2, 4)) is True
    printed = capsys.readouterr().out
    assert "killed by SIGABRT at interpreter shutdown, after it wrote all its results" in printed
    assert "pytorch/pytorch#190489" in printed and "seekdata.exit_ddp()" in printed


@pytest.mark.parametrize("rank1_step, log", [(3, _ABORTED), (4, "Traceback: ValueError\n")])
def test_a_job_that_failed_before_its_results_or_otherwise_is_a_failure(
    tmp_path, rank1_step, log
) -> None:
    run = tmp_path / "job"
    proc = _finished_job(run, log)
    (run / "rank0.jsonl").write_text('{"step": 4, "epoch": 0, "loss": 1.0}\n')
    (run / "rank1.jsonl").write_text(f'{{"step": {rank1_step}, "epoch": 0, "loss": 1.0}}\n')
    (run / "final.pt").write_bytes(b"")
    with pytest.raises(RuntimeError, match="failed \\(exit 1\\)"):
        preempted._wait(proc, run, 60, None, preempted._complete(run, 2, 4))


def test_the_help_says_the_kill_steps_are_drawn_from_the_seed() -> None:
    """A 'random' kill schedule that repeats across runs says it is seeded (issue 35.5)."""
    out = subprocess.run(
        [sys.executable, "-m", "seekdata.demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = " ".join(out.stdout.split())
    assert "drawn at random from --seed: the same steps on every run" in text, out.stdout
    args = preempted.parse(["--steps", "40", "--kills", "3", "--seed", "5"])
    assert preempted.kill_steps(args) == preempted.kill_steps(
        preempted.parse(["--kills", "3", "--seed", "5"])
    )


def test_the_plot_has_a_legend_entry_for_the_steps_run_again() -> None:
    """The darker bands (a resubmitted job re-runs the steps after its last checkpoint) are in
    the legend, as are the SIGKILLs and the jobs' bands (issue 35.5)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    ref = [{s: 1.0 / s for s in range(1, 13)}]
    segments = [(1, 7, 2), (7, 10, 1), (10, 12, 2)]  # killed after 7 and 10, resumed at 7, 10
    assert preempted.rerun_steps(segments) == [(7, 7), (10, 10)]
    assert preempted.rerun_steps([(1, 6, 2), (7, 12, 1)]) == []  # resumed right after: none again
    fig = preempted.figure(ref, [dict(ref[0])], [7, 10], segments)
    try:
        texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert "steps run again: resumed from the checkpoint before the SIGKILL" in texts
    assert "SIGKILL" in texts and "one job of the resumed run (its workers above)" in texts
    assert texts.count("steps run again: resumed from the checkpoint before the SIGKILL") == 1
