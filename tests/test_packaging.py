"""The package is ready to publish: an sdist and a wheel built from it pass ``twine check``,
and every combination of extras the docs name resolves in a fresh environment."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).parent.parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, pathlib.Path]:
    """The sdist and the wheel built from it, once for this file's tests."""
    pytest.importorskip("build", reason="the test extra installs build")
    tmp_path = tmp_path_factory.mktemp("dist")
    # no isolation: the build backend comes from the test extra, so no index is needed; the
    # wheel is built from the unpacked sdist, so the sdist must hold what the build needs
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = tmp_path.glob("seekdata-*.tar.gz")
    (wheel,) = tmp_path.glob("seekdata-*-py3-none-any.whl")
    return sdist, wheel


@pytest.mark.slow
def test_sdist_and_wheel_build_and_pass_twine_check(
    dist: tuple[pathlib.Path, pathlib.Path],
) -> None:
    pytest.importorskip("twine", reason="the test extra installs twine")
    sdist, wheel = dist
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml", "src/seekdata/py.typed"} <= names
    assert {"src/seekdata/__main__.py", "docs/ddp-checkpointing.md"} <= names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]
    assert sdist.stat().st_size < 2_000_000

    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
        (meta,) = [n for n in files if n.endswith(".dist-info/METADATA")]
        metadata = whl.read(meta).decode()
        (entry,) = [n for n in files if n.endswith(".dist-info/entry_points.txt")]
        entry_points = whl.read(entry).decode()
    assert {"seekdata/__main__.py", "seekdata/py.typed", "seekdata/tools/cli.py"} <= files
    assert "seekdata = seekdata.tools.cli:main" in entry_points
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Programming Language :: Python :: 3" in metadata
    assert "Provides-Extra: webdataset" in metadata


#: what ``python -m seekdata.demo`` and ``--elastic`` run, in the package (issue 36.6)
DEMO_FILES = {
    "seekdata/demo.py",
    "seekdata/tools/demo/__init__.py",
    "seekdata/tools/demo/__main__.py",
    "seekdata/tools/demo/preempted.py",
    "seekdata/tools/demo/elastic.py",
    "seekdata/tools/demo/supervisor.py",
    "seekdata/tools/demo/figures.py",
    "seekdata/tools/demo/elastic_train.py",
}


@pytest.mark.slow
def test_the_wheel_ships_what_the_demos_run(
    dist: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """``python -m seekdata.demo --elastic`` failed from a wheel: its training script was
    ``examples/elastic_train.py``, which no wheel holds. The wheel has it, and a venv with the
    wheel installed (and nothing of this checkout on its path) finds it there."""
    _, wheel = dist
    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
    assert files >= DEMO_FILES, sorted(DEMO_FILES - files)
    # the wheel alone; torch and the rest from this interpreter's site-packages
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)  # fmt: skip
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    code = (
        "import pathlib, seekdata\n"
        "from seekdata.tools.demo import elastic\n"
        "script = pathlib.Path(elastic.parse([]).script)\n"
        "print(seekdata.__file__, script, script.is_file(), sep='\\n')\n"
    )
    found = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                           env=env, cwd=tmp_path)  # fmt: skip
    assert found.returncode == 0, found.stderr
    module, script, exists = found.stdout.split("\n")[:3]
    assert module.startswith(str(venv)), module  # the wheel's seekdata, not this checkout's
    assert script.startswith(str(venv)) and exists == "True", script
    helped = subprocess.run(
        [python, "-m", "seekdata.demo", "--elastic", "--help"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: python -m seekdata.demo --elastic")
    # the script the demo runs, as torchrun would start it on each rank
    ran = subprocess.run([python, script, "--help"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0 and "--global-batch" in ran.stdout, ran.stderr


# --- issue 35.5: every combination of extras the docs name resolves in a fresh environment ----

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``pip install -e '.[a,b]'``, and an extra named alone in backticks: `[b]`
NAMED = re.compile(r"\.\[([a-z][a-z,-]*)\]|`\[([a-z][a-z,-]*)\]`")
#: the combinations a new user hit with before the fix (issue 35): ResolutionImpossible
REPORTED = [("remote", "remote-demo"), ("parquet", "remote", "remote-demo", "webdataset")]


def documented_combinations() -> list[tuple[str, ...]]:
    """Every set of extras README.md and docs/*.md tell a reader to install together: each
    ``pip install -e '.[...]'`` (and `[extra]`), each page's ``<!-- extras: -->`` line (what
    its examples need at once), the core alone, and the combinations issue 35 reported."""
    found: set[tuple[str, ...]] = {(), *REPORTED}
    for page in PAGES:
        text = page.read_text()
        for match in NAMED.finditer(text):
            found.add(tuple(sorted((match.group(1) or match.group(2)).split(","))))
        for line in re.findall(r"^<!-- extras: (.*) -->$", text, re.M):
            names = tuple(sorted(line.replace(",", " ").split()))
            found.add(() if names == ("none",) else names)
    return sorted(found)


def _project() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
        import tomli as tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _metadata_wheel(folder: pathlib.Path) -> pathlib.Path:
    """A wheel holding only seekdata's metadata (its requirements and extras, as pyproject.toml
    declares them): pip resolves it as it resolves the clone, without building anything."""
    from packaging.requirements import Requirement

    meta = _project()
    lines = ["Metadata-Version: 2.1", "Name: seekdata", "Version: 0.0.0"]
    lines += [f"Requires-Python: {meta['requires-python']}"]
    lines += [f"Requires-Dist: {r}" for r in meta["dependencies"]]
    for extra, listed in meta["optional-dependencies"].items():
        lines.append(f"Provides-Extra: {extra}")
        for text in listed:
            req = Requirement(text)
            marker = f'extra == "{extra}"'
            if req.marker is not None:
                marker = f"({req.marker}) and {marker}"
            req.marker = None
            lines.append(f"Requires-Dist: {req}; {marker}")
    wheel = folder / "seekdata-0.0.0-py3-none-any.whl"
    info = "seekdata-0.0.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr(f"{info}/METADATA", "\n".join(lines) + "\n")
        wheel_info = (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{info}/WHEEL", wheel_info)
        whl.writestr(f"{info}/RECORD", "")
    return wheel


def _fresh_venv_with_torch(folder: pathlib.Path) -> pathlib.Path:
    """A new virtual environment that has torch as installed (the docs' first step,
    ``pip install torch==2.13.0``) and nothing else: this torch's metadata, copied."""
    import importlib.metadata
    import sysconfig
    import venv

    venv.create(folder, with_pip=False)
    purelib = pathlib.Path(sysconfig.get_path("purelib", "venv", {"base": str(folder)}))
    dist = importlib.metadata.distribution("torch")
    info = purelib / f"torch-{dist.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(dist.read_text("METADATA") or "")
    return folder / "bin" / "python"


def _registry_reachable(folder: pathlib.Path) -> str | None:
    """None when pip reaches a package index that has s3fs (the local indexes some machines
    add do not); else why not."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"),
            *("--retries", "0", "--timeout", "20", "--dest", str(folder), "s3fs"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [line for line in done.stderr.splitlines() if "ignored" not in line]
    return None if done.returncode == 0 else (lines or ["pip download s3fs failed"])[-1]


@pytest.mark.slow
def test_every_extra_combination_the_docs_name_resolves(tmp_path: pathlib.Path) -> None:
    """``pip install -e '.[remote,remote-demo]'`` ended in ResolutionImpossible in a fresh venv
    (an old s3fs pinned to its fsspec; really the newest boto3 needing a botocore no aiobotocore
    takes). Each combination is resolved (``--dry-run``: nothing is installed) by this pip in a
    fresh venv with torch, as a new user's ``pip install`` would; several at once."""
    from concurrent.futures import ThreadPoolExecutor

    if os.environ.get("SEEKDATA_RESOLVE_EXTRAS") != "1":
        # each resolution downloads the metadata of many boto3/botocore releases: tens of
        # minutes on 2 cores, more than the whole suite may take; run it when extras change
        pytest.skip(
            "resolving every documented extra combination takes tens of minutes; "
            "run it with SEEKDATA_RESOLVE_EXTRAS=1 when pyproject.toml's extras change"
        )
    why = _registry_reachable(tmp_path / "download")
    if why is not None:
        pytest.skip(f"resolving extras needs pip's package index, which is unreachable: {why}")
    wheel = _metadata_wheel(tmp_path)
    python = _fresh_venv_with_torch(tmp_path / "venv")
    combos = documented_combinations()
    extras = set(_project()["optional-dependencies"])
    unknown = sorted({e for combo in combos for e in combo} - extras)
    assert not unknown, f"the docs name extras pyproject.toml does not declare: {unknown}"

    def resolve(combo: tuple[str, ...]) -> tuple[tuple[str, ...], int, str]:
        target = f"seekdata[{','.join(combo)}] @ {wheel.as_uri()}" if combo else str(wheel)
        done = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "--python", str(python), "install"),
                *("--dry-run", "--quiet", target),
            ],
            capture_output=True,
            text=True,
            timeout=1500,
        )
        return combo, done.returncode, done.stderr

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(resolve, combos))
    failed = [
        f"[{','.join(c)}]: "
        + "\n".join(line for line in err.splitlines() if "ignored" not in line)[-1500:]
        for c, rc, err in results
        if rc != 0
    ]
    assert not failed, "these documented extra combinations do not resolve:\n" + "\n".join(failed)
