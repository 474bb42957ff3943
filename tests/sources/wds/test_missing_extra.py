"""Without webdataset, ``import seekdata.wds`` says which extra to install, as Parquet and the
remote back-ends do (issue 35.5), and how to install it from a clone (seekdata is not on PyPI)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Runs ``code`` with ``webdataset`` (and its submodules) unimportable, as when not installed.
HIDDEN = """
import importlib.abc, sys

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "webdataset" or name.startswith("webdataset."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
"""


@pytest.mark.parametrize("module", ["seekdata.wds", "seekdata.sources.wds.tarindex"])
def test_import_without_webdataset_names_the_extra_and_the_clone_install(module: str) -> None:
    code = (
        HIDDEN
        + f"""
try:
    import {module}
except ImportError as exc:
    print(type(exc).__name__, exc, sep=": ")
    print("cause:", getattr(exc.__cause__, "name", None))
else:
    print("imported")
"""
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, cause = done.stdout.splitlines()
    assert first.startswith("ImportError: seekdata.wds needs the 'webdataset' extra"), first
    assert "pip install -e '.[webdataset]' in a clone of seekdata" in first
    assert cause == "cause: webdataset"  # the missing module stays the cause (seekdata's CLI
    # reads it to name the extra in one line)


def test_with_webdataset_installed_the_face_imports() -> None:
    pytest.importorskip("webdataset")
    import seekdata.wds

    assert seekdata.wds.TarShards is not None
