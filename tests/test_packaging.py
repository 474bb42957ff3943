"""The package is ready to publish: an sdist and a wheel built from it pass ``twine check``."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).parent.parent

pytest.importorskip("build", reason="the test extra installs build")
pytest.importorskip("twine", reason="the test extra installs twine")


@pytest.mark.slow
def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path: pathlib.Path) -> None:
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
