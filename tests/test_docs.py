"""Docs are part of the feature: every ```python block of README.md and docs/*.md runs.

Blocks of one file run in order in one namespace, from a temporary working directory.
A block fenced as ```python skip is shown to readers but not run (torchrun, sbatch, GPUs).
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)


def blocks(path: pathlib.Path) -> list[str]:
    return [body for info, body in BLOCK.findall(path.read_text()) if "skip" not in info.split()]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_doc_code_runs(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    code = blocks(path)
    if not code:
        pytest.skip(f"{path.name} has no runnable python blocks")
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        for i, body in enumerate(code):
            exec(compile(body, f"{path.name}[block {i}]", "exec"), namespace)
    finally:
        os.chdir(old)
