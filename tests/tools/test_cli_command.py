"""The ``seekdata`` command as a new user meets it, run installed, in fresh processes:
``python -m seekdata``, missing optional packages, start-up without torch, help text."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

import seekdata

#: the installed console script (it imports seekdata as this process does: PYTHONPATH first)
COMMAND = shutil.which("seekdata")


def seekdata_command(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [*([COMMAND] if COMMAND else [sys.executable, "-m", "seekdata.tools.cli"]), *argv]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def test_python_m_seekdata_is_the_seekdata_command(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "seekdata", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: seekdata ")
    assert all(command in done.stdout for command in ("index", "inspect", "verify", "bench"))
    state = tmp_path / "state.json"
    loader = seekdata.StatefulDataLoader(list(range(10)), batch_size=2, shuffle=True, seed=1)
    state.write_text(json.dumps({"loader": loader.state_dict()}))
    inspected = subprocess.run(
        [sys.executable, "-m", "seekdata", "inspect", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "loader" in inspected.stdout


def _blocked(tmp_path: pathlib.Path, *modules: str) -> dict[str, str]:
    """An environment where ``modules`` are not found, as when they are not installed: a
    ``sitecustomize`` puts a finder first that refuses them (a stub module that raised on
    import would still be *found*, and seekdata finds webdataset without importing it)."""
    stubs = tmp_path / "not-installed"
    stubs.mkdir()
    (stubs / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        f"HIDDEN = {tuple(modules)!r}\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in HIDDEN:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(stubs), os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize(
    ("argv", "blocked", "package"),
    [
        # tar shards need webdataset
        (["index", "{dir}/shard.tar"], ("webdataset",), "webdataset"),
        # a brace pattern of token files needs braceexpand (webdataset is there); one numeric
        # range alone is expanded without it, so the patterns here are lists
        (["index", "--eos-id", "0", "{dir}/part-{{0,1}}.bin"], ("braceexpand",), "braceexpand"),
        # a brace pattern of shards, with webdataset there but not braceexpand
        (["index", "{dir}/shard-{{0,1}}.tar"], ("braceexpand",), "braceexpand"),
    ],
)
def test_a_missing_optional_package_is_one_line_naming_the_extra(
    tmp_path: pathlib.Path, argv: list[str], blocked: tuple[str, ...], package: str
) -> None:
    for name in ("part-0.bin", "part-1.bin"):
        (tmp_path / name).write_bytes(b"\x01\x00\x00\x00")
    done = seekdata_command(
        *(a.format(dir=tmp_path) for a in argv), env=_blocked(tmp_path, *blocked)
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        f"seekdata index: error: this needs the optional package {package!r}"
    )
    assert "pip install -e '.[webdataset]'" in done.stderr


def test_an_import_error_that_is_not_an_optional_package_keeps_its_traceback() -> None:
    from seekdata.tools._command import missing_extra

    assert missing_extra(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
    wrapped = ImportError("a brace pattern needs braceexpand")
    wrapped.__cause__ = ModuleNotFoundError("No module named 'braceexpand'", name="braceexpand")
    assert "'webdataset' extra" in (missing_extra(wrapped) or "")


_NO_TORCH = (
    "import sys\n"
    "from seekdata.tools.cli import main\n"
    "try:\n"
    "    status = main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    status = exc.code\n"
    "sys.stdout.flush()\n"
    "torch = sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3]\n"
    "print('STATUS', status, 'TORCH', torch, file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    "argv", [["--help"], ["bench", "--help"], ["index", "--help"], ["inspect"]]
)
def test_help_and_inspecting_a_json_state_do_not_import_torch(
    tmp_path: pathlib.Path, argv: list[str]
) -> None:
    if argv == ["inspect"]:
        loader = seekdata.StatefulDataLoader(list(range(10)), batch_size=2, shuffle=True, seed=1)
        sampler = seekdata.DistributedSampler(range(10), num_replicas=2, rank=0, seed=1)
        state = {"loader": loader.state_dict(), "sampler": sampler.state_dict()}
        (tmp_path / "state.json").write_text(json.dumps(state))
        argv = ["inspect", str(tmp_path / "state.json")]
    done = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, *argv], capture_output=True, text=True, timeout=120
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last == "STATUS 0 TORCH []", done.stdout + done.stderr


def test_bench_help_is_plain_text() -> None:
    done = seekdata_command("bench", "--help")
    assert done.returncode == 0, done.stderr
    assert "``" not in done.stdout and ":func:" not in done.stdout
    assert "sweeps num_workers, batch size and pin_memory" in " ".join(done.stdout.split())


def test_torch_is_still_there_when_the_library_is_used() -> None:
    """The lazy names resolve to the objects their modules define."""
    from seekdata.loader import StatefulDataLoader

    assert seekdata.StatefulDataLoader is StatefulDataLoader
    assert isinstance(seekdata.torch_generator(0, 1), torch.Generator)
    assert "exit_ddp" in dir(seekdata) and callable(seekdata.exit_ddp)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        seekdata.nope  # noqa: B018
