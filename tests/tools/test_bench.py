"""``seekdata bench``: the quick run writes its JSON and plot; bad arguments are usage errors.

The command is reached through :func:`seekdata.tools.bench.add_parser` on a parser of our own,
so the test does not depend on how ``seekdata.tools.cli`` wires it. No timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import pytest
import torch

import seekdata
from seekdata.tools import bench


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="seekdata")
    bench.add_parser(p.add_subparsers(dest="command"))
    return p


def run(*argv: str) -> int:
    args = parser().parse_args(["bench", *argv])
    status: int = args.run(args)
    return status


def test_quick_run_writes_json_and_png(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "sub" / "b.json"
    assert run("--quick", "--no-progress", "--workers", "0", "--out", str(out)) == 0
    payload = json.loads(out.read_text())
    assert {"benchmark", "machine", "config", "throughput", "resume", "state", "notes"} <= set(
        payload
    )
    assert payload["config"]["workers"] == [0] and payload["config"]["quick"] is True
    assert payload["config"]["workload"] == "synthetic,batched"  # the default
    rows = payload["throughput"]
    assert [r["workload"] for r in rows] == ["synthetic", "batched"]
    for row in rows:
        assert row["num_workers"] == 0 and row["batch_size"] == 32 and row["pin_memory"] is False
        for name in bench.LOADERS:
            assert row[name] > 0 and row[f"{name} / DataLoader"] > 0
        assert row["DataLoader / DataLoader"] == 1.0
        assert row["seekdata / DataLoader + reseed"] > 0  # both of seekdata's ratios
    assert any("batched workload: a datasets Arrow table" in note for note in payload["notes"])
    points = {(r["loader"], r["position"]) for r in payload["resume"]}
    assert points == {(name, p) for name in bench.LOADERS for p in (0, 96, 992)}
    assert all(r["ms"] > 0 and not r["extrapolated"] for r in payload["resume"])
    state = {r["loader"]: r for r in payload["state"]}
    assert state["seekdata"]["json_native"] is True and state["torchdata"]["json_native"] is False
    assert 0 < state["seekdata"]["json_bytes"] < 512
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "samples/s" in printed and "load_state_dict -> first batch" in printed
    header = next(line for line in printed.splitlines() if line.startswith("workload "))
    assert "seekdata / DataLoader " in header and "seekdata / DataLoader + reseed" in header


def test_cpu_only_skips_pinning_with_a_note(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "b.json"
    argv = ["--quick", "--no-progress", "--no-resume", "--workers", "0", "--workload", "synthetic"]
    assert run(*argv, "--pin-memory", "both", "--out", str(out)) == 0
    payload = json.loads(out.read_text())
    assert [r["pin_memory"] for r in payload["throughput"]] == [False]
    assert any("pin_memory=True skipped" in note for note in payload["notes"])
    assert payload["resume"] == [] and payload["config"]["device"] is None


def test_without_datasets_the_batched_workload_is_a_memmap_of_rows(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench._report, "datasets_available", lambda: False)
    out = tmp_path / "b.json"
    argv = ["--quick", "--no-progress", "--no-resume", "--workers", "0", "--workload", "batched"]
    assert run(*argv, "--out", str(out)) == 0
    payload = json.loads(out.read_text())
    (row,) = payload["throughput"]
    assert row["workload"] == "batched" and row["seekdata / DataLoader"] > 0
    assert any("a numpy memmap" in note for note in payload["notes"])


def test_each_loader_has_its_own_colour() -> None:
    plt = bench.pyplot()
    fig, ax = plt.subplots()
    names = [*bench.LOADERS, "DataLoader + reseed", "grain", "seekdata / DataLoader", "other"]
    bench.plot_bars(ax, ["a", "b"], {name: [1.0, 2.0] for name in names}, "samples/s")
    colours = [tuple(bars.patches[0].get_facecolor()) for bars in ax.containers]
    plt.close(fig)
    assert len(colours) == len(names) and len(set(colours)) == len(names)


@pytest.mark.parametrize(
    "argv",
    [
        ["--workload", "synthetic,nope"],
        ["--workers", "-1"],
        ["--workers", "two"],
        ["--batch-sizes", "0"],
        ["--batch-sizes", "32,"],
        ["--pin-memory", "maybe"],
        ["--rounds", "0"],
    ],
)
def test_bad_arguments_exit_2_with_the_option_named(
    argv: list[str], capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["bench", *argv])
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_positions_past_the_dataset_are_a_value_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="--resume-positions must be at most --resume-n"):
        run("--quick", "--no-progress", "--resume-n", "100", "--resume-positions", "1000",
            "--out", str(tmp_path / "b.json"))  # fmt: skip


def test_interleave_shuffles_every_round_and_waits_for_children() -> None:
    """A fixed order A B C biases the case after a slow shutdown; and no case may start while
    the previous one's worker processes are still alive."""
    calls: list[str] = []
    alive_at_start: list[int] = []

    def case(name: str) -> Any:
        def run() -> str:
            alive_at_start.append(len(multiprocessing.active_children()))
            calls.append(name)
            # leave a child behind that exits a moment later, as a loader's workers do (forked
            # from a fork server: a spawned interpreter per child cost most of the test's time)
            forkserver.Process(target=time.sleep, args=(0.3,)).start()
            return name

        return run

    forkserver = multiprocessing.get_context("forkserver")
    out = bench.interleave({k: case(k) for k in "ABCD"}, rounds=3, seed=1)
    assert out == {k: [k] * 3 for k in "ABCD"}
    orders = [tuple(calls[i : i + 4]) for i in range(0, 12, 4)]
    assert all(sorted(o) == list("ABCD") for o in orders) and len(set(orders)) > 1
    assert alive_at_start == [0] * 12 and multiprocessing.active_children() == []


def test_run_loader_reports_start_up_apart_from_steady_state() -> None:
    loader = bench.make_loader("DataLoader + reseed", bench.TokenWindows(4096), 8, 0)
    result = bench.run_loader(loader, batches=5, warmup=2)
    assert set(result) == {"startup_s", "samples_s"}
    assert result["startup_s"] > 0 and result["samples_s"] > 0


def test_the_reseeding_baseline_makes_each_sample_a_function_of_its_index() -> None:
    data = bench.Reseeding(bench.TokenWindows(4096))
    assert torch.equal(data[17], data[17]) and not torch.equal(data[17][:4], data[18][:4])
    images = bench.Images(4, size=64, crop=32, distinct=2)
    torch.manual_seed(0)
    a = images[1]
    torch.manual_seed(0)
    assert a.shape == (3, 32, 32) and a.dtype == torch.float32 and torch.equal(a, images[1])


def test_tokens_workload_compares_seekdata_with_the_reseeding_dataloader(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "b.json"
    argv = ["--quick", "--no-progress", "--no-resume", "--workers", "0", "--workload", "tokens"]
    assert run(*argv, "--out", str(out)) == 0
    payload = json.loads(out.read_text())
    (row,) = payload["throughput"]
    assert payload["config"]["workload"] == "tokens"
    assert row["seekdata / DataLoader + reseed"] > 0 and row["DataLoader + reseed"] > 0
    assert all(row[f"{name} startup ms"] > 0 for name in payload["config"]["loaders"])


#: ``seekdata ...`` in a fresh interpreter where ``import matplotlib`` fails, as without it
WITHOUT_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None; "
    "from seekdata.tools.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_without_matplotlib_the_table_and_json_come_and_no_plot_is_claimed(
    tmp_path: pathlib.Path,
) -> None:
    """No traceback after the whole run: the command says first that it will draw no plot and
    why (naming the extra), then prints the table, writes the JSON and exits 0."""
    out = tmp_path / "b.json"
    src = str(pathlib.Path(seekdata.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    # one workload (the default adds the batched one, which imports datasets): what is checked is
    # the run without matplotlib, which draws no plot whatever the workloads
    argv = ["bench", "--quick", "--no-progress", "--no-resume", "--workers", "0",
            "--workload", "synthetic", "--out", str(out)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a quick run takes a few seconds; a hang must not stall the suite
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("seekdata bench: no plot: matplotlib is not installed")
    assert "pip install 'seekdata[bench]'" in first
    assert "samples/s" in done.stdout and "note: no plot" in done.stdout
    assert "b.png" not in done.stdout and not out.with_suffix(".png").exists()
    notes = json.loads(out.read_text())["notes"]
    assert any(note.startswith("no plot: matplotlib is not installed") for note in notes)


def test_threads_run_beside_processes_with_workers_and_the_advice_says_why(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "b.json"
    argv = [
        "--quick",
        "--no-progress",
        "--no-resume",
        "--workers",
        "0,1",
        "--workload",
        "synthetic",
    ]
    assert run(*argv, "--out", str(out)) == 0
    payload = json.loads(out.read_text())
    rows = {r["num_workers"]: r for r in payload["throughput"]}
    assert "seekdata threads" not in rows[0] and "pick" not in rows[0]  # no workers: no threads
    row = rows[1]
    assert row["seekdata threads"] > 0 and row["threads / processes"] > 0
    assert len(row["threads / processes rounds"]) == payload["config"]["rounds"]
    assert row["copy_bytes"] > 0 and row["global_rng"] is True  # numpy global draws
    assert row["pick"] == "multiprocessing" and "global RNG" in row["why"]
    printed = capsys.readouterr().out
    assert "which workers to pick" in printed and f"worker_method='{row['pick']}'" in printed
    assert any("seekdata threads: worker_method='thread'" in n for n in payload["notes"])


def test_a_dataset_drawing_through_seekdata_is_told_its_pick_on_speed(
    tmp_path: pathlib.Path,
) -> None:
    dataset = bench.Synthetic(4096, draw="sample")  # seekdata.sample_rng(): exact in threads
    assert not bench._report.draws_global_rng(dataset, 8)
    assert bench._report.draws_global_rng(bench.Synthetic(4096, draw="global"), 8)


@pytest.mark.parametrize(
    ("ratios", "size", "pick", "why"),
    [
        ([1.1, 0.98, 1.3], 10, "thread", "as fast or faster"),
        ([0.9, 1.05, 0.95], 2**30, "thread", "within noise"),
        ([0.9, 1.05, 0.95], None, "thread", "does not pickle"),
        ([0.9, 1.05, 0.95], 2**10, "multiprocessing", "small to copy"),
        ([0.5, 0.6, 0.4], 2**30, "multiprocessing", "holds the GIL"),
        ([1.5, 1.6, 1.4], 2**30, "multiprocessing", "global RNG"),
    ],
)
def test_the_pick_rule(ratios: list[float], size: int | None, pick: str, why: str) -> None:
    got, reason = bench._report.pick_workers(ratios, size, global_draws=why == "global RNG")
    assert got == pick and why in reason, reason
