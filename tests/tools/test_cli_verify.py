"""`seekdata verify`: fresh-process resume checks; exit 0 (exact), 1 (diverges) or 2 (errors).

Every run starts Python processes that import torch, so the factories are tiny (10 samples,
3 batches per epoch) and the stop points few.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import pytest

from seekdata.tools import verify
from tests.helpers.paths import SCRIPTS

FACTORIES = SCRIPTS / "_verify_factories.py"


def factory(name: str) -> str:
    return f"{FACTORIES}:{name}"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="seekdata")
    verify.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["verify", *argv])


def run(*argv: str) -> int:
    """As the seekdata command runs it, once cli.py registers add_parser."""
    args = parse(*argv)
    return int(args.run(args))


@pytest.fixture
def private_tmp(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """tempfile's folder, so a test can see that verify leaves nothing behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_resumable_loader_passes_with_other_workers(
    capsys: pytest.CaptureFixture[str], private_tmp: pathlib.Path
) -> None:
    assert run(factory("good"), "--stops", "3", "--resume-workers", "1") == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"seekdata verify: PASS: {factory('good')} resumed exactly at 3 stop")
    stops = "after step 2 (epoch 0, batch 2, its last); at the end of epoch 0 (after its loop); "
    assert stops in out  # the epoch end, both ways, is always checked
    assert "after step 4 (epoch 1, batch 1)." in out  # drawn with numpy_generator(0, ...)
    assert "Every batch and step_fn output of the 6-step run matched bit for bit." in out
    assert "resumed with num_workers=1" in err and "uninterrupted run: 6 steps (3 + 3)" in err
    assert "[3/3] resumed" in err and "exact" in err and "DIVERGES" not in err
    assert list(private_tmp.iterdir()) == []


def test_a_stateful_dataset_rng_is_caught(
    capsys: pytest.CaptureFixture[str], private_tmp: pathlib.Path
) -> None:
    assert run(factory("stateful_rng"), "--stops", "2") == 1
    out, err = capsys.readouterr()
    assert out.startswith(
        "seekdata verify: FAIL: the run resumed after step 2 (epoch 0, batch 2, its last) "
        "diverges from the uninterrupted run at step 3 (epoch 1, batch 0): batch['x']: values "
        "differ, max |difference| = "
    )
    assert '"position": 10' in out and "RandomState" in out  # the state, and the likely cause
    assert "[1/2] resumed after step 2 (epoch 0, batch 2, its last): DIVERGES" in err
    assert "[2/2]" not in err  # the first divergence ends the check
    assert list(private_tmp.iterdir()) == []


def test_an_unkeyed_model_step_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(factory("unkeyed_step"), "--stops", "1", "--steps-per-epoch-limit", "2") == 1
    out, err = capsys.readouterr()
    assert "uninterrupted run: 4 steps (2 + 2)" in err  # epochs cut to 2 of their 3 batches
    assert "resumed at the end of epoch 0 (after its loop) diverges from the uninterrupted " in out
    assert "at step 2 (epoch 1, batch 0): step_fn(batch, step): values differ" in out


def test_a_model_step_is_keyed_by_the_loader_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(factory("loader_keyed_step"), "--stops", "2", "--steps-per-epoch-limit", "2") == 0
    assert "PASS" in capsys.readouterr().out


def test_a_time_seeded_loader_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(factory("time_seeded"), "--stops", "1") == 1
    out = capsys.readouterr().out
    assert "at the end of epoch 0 (after its loop) cannot load its state: load_state_dict " in out
    assert "StateMismatchError" in out and "seed is" in out


def test_python_dash_m_runs_the_command(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "seekdata.tools.verify", "no_colon"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        "seekdata verify: error: FACTORY must be MODULE:FUNCTION, e.g. 'train_data:make_loader' "
        "or 'path/to/file.py:make_loader'; got 'no_colon'\n"
    )


def test_a_factory_that_breaks_the_protocol_exits_2(
    capsys: pytest.CaptureFixture[str], private_tmp: pathlib.Path
) -> None:
    assert verify.main([factory("not_a_loader"), "--stops", "1"]) == 2
    err = capsys.readouterr().err
    assert "seekdata verify: error: the uninterrupted run: FACTORY must return a loader" in err
    assert "it returned a list without state_dict, load_state_dict" in err
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (factory("tensor_state"), "state_dict() must return JSON-native values"),
        (factory("missing"), "_verify_factories must define 'missing'; it does not (its"),
        (factory("N"), "_verify_factories.py:N must be a function; got int"),
        ("no_such_module:make", "MODULE must be importable from"),
        ("no/such/file.py:make", "file.py does not exist"),
    ],
)
def test_protocol_errors_say_what_to_fix(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, spec: str, message: str
) -> None:
    """The child's side, run in this process: it writes the message the parent raises."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    job = {"spec": spec, "cwd": str(tmp_path), "dir": str(tmp_path), "epochs": 1, "limit": 2}
    (tmp_path / "job.json").write_text(json.dumps({**job, "mode": "reference", "kwargs": {}}))
    assert verify._child(str(tmp_path / "job.json")) == 2
    assert message in (tmp_path / "error.txt").read_text()


def test_a_hung_process_is_stopped(
    capsys: pytest.CaptureFixture[str], private_tmp: pathlib.Path
) -> None:
    assert verify.main([factory("slow"), "--timeout", "2"]) == 2
    assert "the uninterrupted run must finish within --timeout 2 s" in capsys.readouterr().err
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no_colon"], "FACTORY must be MODULE:FUNCTION"),
        (["m:f", "--stops", "0"], "--stops must be at least 1; got 0"),
        (["m:f", "--epochs", "0"], "--epochs must be at least 1"),
        (["m:f", "--resume-workers", "-1"], "--resume-workers must be at least 0"),
        (["m:f", "--timeout", "0"], "--timeout must be more than 0"),
    ],
)
def test_bad_arguments_start_nothing(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="must be") as info:
        run(*argv)
    assert message in str(info.value)


def test_stop_points_include_the_epoch_end_and_follow_the_seed() -> None:
    def record(steps: int, after_loop: bool = False) -> dict:
        return {"steps": steps, "after_loop": after_loop}

    records = [record(s) for s in range(1, 6)] + [record(5, True)]
    records += [record(s) for s in range(6, 11)] + [record(10, True)]
    chosen = verify._choose(records, 10, 5, seed=0)
    assert record(5) in chosen and record(5, True) in chosen  # epoch 0's last batch and end
    assert len(chosen) == 5 and all(r["steps"] < 10 for r in chosen)
    assert chosen == verify._choose(records, 10, 5, seed=0)
    assert any(verify._choose(records, 10, 5, seed=s) != chosen for s in range(1, 5))
    assert verify._choose(records, 10, 1, seed=0) == [record(5, True)]
    assert len(verify._choose(records, 10, 99, seed=0)) == 10  # every step before the end


def test_add_parser_registers_verify() -> None:
    args = parse("m:f", "--resume-workers", "2", "--steps-per-epoch-limit", "7")
    assert (args.command, args.factory, args.epochs, args.stops, args.seed) == (
        "verify",
        "m:f",
        2,
        5,
        0,
    )
    assert (args.resume_workers, args.steps_per_epoch_limit, args.timeout) == (2, 7, 600.0)
    assert args.run is verify.run


def test_help_says_the_factory_must_take_num_workers() -> None:
    """issue 35: --help did not say that --resume-workers N calls FACTORY(num_workers=N)."""
    done = subprocess.run(
        [sys.executable, "-m", "seekdata", "verify", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps at the terminal's width
    assert "FACTORY(num_workers=N), so the factory must accept a num_workers keyword" in text
    assert "def make_loader(num_workers=0)" in text
    assert "--resume-workers N build the resumed loaders with FACTORY(num_workers=N): the " in text
    assert "FACTORY() returns a loader" in text and "(loader, step_fn)" in text


def test_run_loop_is_the_loop_of_verify_and_assert_exact_resume() -> None:
    """One loop: epochs, a per-epoch limit, a mid-epoch start, a stop, the after-epoch call."""
    from seekdata import testing
    from seekdata.tools import _verify_child

    epochs: list[int] = []

    class Loader(list):
        def set_epoch(self, epoch: int) -> None:
            epochs.append(epoch)

    loader, calls = Loader([10, 11, 12]), []

    def record(batch, epoch, k, step) -> bool:  # type: ignore[no-untyped-def]
        calls.append((batch, epoch, k, step))
        return batch == 12 and epoch == 3

    steps = testing.run_loop(loader, range(1, 4), record, limit=2, in_epoch=1, steps=5)
    assert epochs == [1, 2, 3]
    assert calls == [
        (10, 1, 2, 6), (None, 2, 0, 6),  # resumed mid-epoch at batch 1 of 2: one batch left
        (10, 2, 1, 7), (11, 2, 2, 8), (None, 3, 0, 8),
        (10, 3, 1, 9), (11, 3, 2, 10), (None, 4, 0, 10),
    ]  # fmt: skip
    assert steps == 10
    assert testing.run_loop(loader, [3], record, set_epoch=False) == 3  # stops at 12 of epoch 3
    assert epochs == [1, 2, 3]
    job, start = {"epochs": 2, "limit": None}, {"epoch": 1, "in_epoch": 0, "steps": 0}
    assert _verify_child._loop(loader, job, start, lambda *a: False) == 3
    assert epochs == [1, 2, 3, 1]  # verify calls set_epoch when the loader has one


def test_an_abort_at_shutdown_after_the_results_is_a_note_not_a_failure(
    capsys: pytest.CaptureFixture[str], private_tmp: pathlib.Path
) -> None:
    assert run(factory("aborts_at_shutdown"), "--stops", "2") == 0
    out, err = capsys.readouterr()
    assert "PASS" in out and "FAIL" not in out
    assert "the uninterrupted run was killed by SIGABRT at interpreter shutdown, after it" in err
    assert "pytorch/pytorch#190489" in err and err.count("killed by SIGABRT") == 3


def test_an_abort_before_the_results_is_an_error(
    capsys: pytest.CaptureFixture[str], private_tmp: pathlib.Path
) -> None:
    with pytest.raises(ValueError, match="the uninterrupted run must finish; it exited with "
                       "status -6"):  # fmt: skip
        run(factory("aborts_at_start"), "--stops", "2")
    out, err = capsys.readouterr()
    assert "FAIL" not in out and "killed by SIGABRT" not in err
