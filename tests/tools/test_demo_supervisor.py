"""The demos' one torchrun supervisor (issue 36.6): both demos start and kill their jobs through
it, and its kill ends every process of a job shaped as torchrun's is (each rank in a session
of its own, its DataLoader workers in its group)."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import sys
import time

import pytest

from seekdata.tools.demo import supervisor

DEMO = pathlib.Path(supervisor.__file__).parent

#: calls that start or signal a process: only the supervisor makes them
_PROCESS_CALLS = {"Popen", "killpg", "kill", "getpgid", "setsid", "start_new_session"}


def _process_calls(path: pathlib.Path) -> list[str]:
    """The calls in ``path`` that start or signal a process (``supervisor.kill`` aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = getattr(getattr(func, "value", None), "id", None)
        if name in _PROCESS_CALLS and owner != "supervisor":
            found.append(f"{path.name}:{node.lineno} {name}")
        found += [f"{path.name}:{node.lineno} {k.arg}=" for k in node.keywords
                  if k.arg in _PROCESS_CALLS]  # fmt: skip
    return found


def test_both_demos_start_and_kill_jobs_only_through_the_supervisor() -> None:
    """The SIGKILL fix of de85a21 reached one demo of two, each with its own kill rule: now
    neither demo starts a process or sends a signal itself."""
    demos = [DEMO / "preempted.py", DEMO / "elastic.py"]
    assert [call for path in demos for call in _process_calls(path)] == []
    assert _process_calls(DEMO / "supervisor.py")  # the check sees the calls where they are
    for path in demos:
        assert "supervisor.start(" in path.read_text() and "supervisor.kill(" in path.read_text()


#: a stand-in for torchrun: two "ranks", each in a session of its own (as torchrun starts them),
#: each with a child in its group (a DataLoader worker); every pid written to argv[1], then wait
_FAKE_TORCHRUN = """
import json, subprocess, sys, time
rank = [sys.executable, "-c", "import subprocess, sys, time; "
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "print(w.pid, flush=True); time.sleep(600)"]
ranks = [subprocess.Popen(rank, stdout=subprocess.PIPE, text=True, start_new_session=True)
         for _ in range(2)]
workers = [int(r.stdout.readline()) for r in ranks]
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump({"ranks": [r.pid for r in ranks], "workers": workers}, f)
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and waiting to be reaped, does not)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not pathlib.Path("/proc").is_dir(), reason="reads /proc to find processes")
def test_the_kill_ends_torchrun_every_rank_in_its_own_session_and_their_workers(
    tmp_path: pathlib.Path,
) -> None:
    pids = tmp_path / "pids.json"
    job = supervisor.start(
        [sys.executable, "-c", _FAKE_TORCHRUN, str(pids)], os.environ, tmp_path / "job.log"
    )
    try:
        deadline = time.monotonic() + 120
        while not pids.exists():  # bounded: the stand-in writes it once its ranks started
            assert job.poll() is None, (tmp_path / "job.log").read_text()
            assert time.monotonic() < deadline, "the stand-in did not start its ranks"
            time.sleep(0.05)
        started = json.loads(pids.read_text())
        ranks, workers = started["ranks"], started["workers"]
        assert all(os.getpgid(r) == r != os.getpgid(job.pid) for r in ranks)  # sessions apart
        assert set(supervisor.descendants(job.pid)) >= {*ranks, *workers}
        supervisor.kill(job)
        assert job.returncode == -9
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in [*ranks, *workers]):  # killed: gone once reaped
            assert time.monotonic() < deadline, [p for p in [*ranks, *workers] if _alive(p)]
            time.sleep(0.05)
        supervisor.kill(job)  # a job already ended is left alone
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
