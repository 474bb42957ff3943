"""Docs are part of the feature: every ```python block of README.md and docs/*.md runs.

Blocks of one file run in order in one namespace, from a temporary working directory.
A block fenced as ```python skip is shown to readers but not run (torchrun, sbatch, GPUs).
Each page names the extras its blocks need in a ``<!-- extras: ... -->`` line, and its blocks
import nothing else and run with nothing else installed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import seekdata

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


# -- each page runs with only the extras it names --------------------------------------------
#
# A page names the extras its runnable blocks need in one line, ``<!-- extras: webdataset -->``
# (``none`` for torch, torchdata and numpy alone); the extras' packages are read from
# pyproject.toml.

EXTRAS_LINE = re.compile(r"^<!-- extras: (.*) -->$", re.M)
#: seekdata modules that need an extra (their own imports are not in the page)
SEEKDATA_EXTRAS = {
    "seekdata.wds": "webdataset",
    "seekdata.parquet": "parquet",
    "seekdata.integrations.accelerate": "accelerate",
    "seekdata.integrations.transformers": "transformers",
    "seekdata.integrations.lightning": "lightning",
}


def page_extras(path: pathlib.Path) -> tuple[str, ...]:
    lines = EXTRAS_LINE.findall(path.read_text())
    assert len(lines) == 1, (
        f"{path.name} must have one line '<!-- extras: NAME ... -->' naming the extras its "
        f"python blocks need ('none' for the core); found {len(lines)}"
    )
    names = tuple(sorted(lines[0].replace(",", " ").split()))
    return () if names == ("none",) else names


def project() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements(extras: tuple[str, ...]) -> set[str]:
    """The distributions the core and ``extras`` list, by canonical name."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    meta = project()
    unknown = set(extras) - set(meta["optional-dependencies"])
    assert not unknown, f"extras {sorted(unknown)} are not in pyproject.toml"
    listed = [*meta["dependencies"], *(r for e in extras for r in meta["optional-dependencies"][e])]
    return {canonicalize_name(Requirement(r).name) for r in listed}


def top_level_imports(code: str) -> set[str]:
    """Every module a block imports, as written (``import a.b`` gives ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_doc_imports_only_what_its_extras_install(path: pathlib.Path) -> None:
    from packaging.utils import canonicalize_name

    extras = page_extras(path)
    allowed = requirements(extras)
    owners = importlib.metadata.packages_distributions()
    wrong = []
    for module in sorted(top_level_imports("\n".join(blocks(path)))):
        top = module.partition(".")[0]
        if top in sys.stdlib_module_names:
            continue
        if top == "seekdata":
            need = [e for m, e in SEEKDATA_EXTRAS.items() if (module + ".").startswith(m + ".")]
            wrong += [f"{module} (needs the {e!r} extra)" for e in need if e not in extras]
            continue
        dists = {canonicalize_name(d) for d in owners.get(top, [])}
        if not dists & allowed:
            wrong.append(f"{module} (from {', '.join(sorted(dists)) or 'no installed package'})")
    assert not wrong, (
        f"{path.name} must import only the standard library, the core and its extras "
        f"{list(extras) or 'none'}; it imports {', '.join(wrong)}: name an extra that installs "
        f"it in its '<!-- extras: ... -->' line, or do without it"
    )


def installed_closure(names: set[str]) -> set[str]:
    """``names`` and everything they require when installed, recursively (canonical names)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, str]] = set()
    todo = [(name, "") for name in names]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            listed = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in listed:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                dep = canonicalize_name(req.name)
                todo += [(dep, "")] + [(dep, e) for e in req.extras]
    return {name for name, _ in seen}


def _extras_or_core(path: pathlib.Path) -> tuple[str, ...]:
    """For grouping pages at collection: a page without its line (an error in the test above)
    runs with the core."""
    try:
        return page_extras(path)
    except AssertionError:
        return ()


@pytest.mark.parametrize(
    "extras",
    sorted({_extras_or_core(p) for p in FILES if blocks(p)}),
    ids=lambda e: "+".join(e) or "core",
)
def test_docs_run_with_only_the_extras_they_name(extras: tuple[str, ...]) -> None:
    """The pages that name ``extras`` run in a process where every installed package that the
    core and those extras do not install, directly or through their dependencies, is hidden:
    an import that only works in a full test install (Pillow behind webdataset's encoder,
    pytest) fails here."""
    from packaging.utils import canonicalize_name

    allowed = installed_closure(requirements(extras)) | {"seekdata"}
    owners = importlib.metadata.packages_distributions()
    hidden = {
        module
        for module, dists in owners.items()
        if not {canonicalize_name(d) for d in dists} & allowed
    }
    installed = {canonicalize_name(d.metadata["Name"]) for d in importlib.metadata.distributions()}
    pages = [
        {"name": p.name, "blocks": blocks(p)}
        for p in FILES
        if blocks(p) and _extras_or_core(p) == extras
    ]
    src = str(pathlib.Path(seekdata.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scripts" / "_docs_runner.py")],
        input=json.dumps(
            {
                "hidden": sorted(hidden),
                "hidden_distributions": sorted(installed - allowed),
                "pages": pages,
            }
        ),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,  # the pages take ~15 s in all; a hang must not stall the suite
    )
    assert done.returncode == 0, (
        f"pages {[p['name'] for p in pages]} must run with only the extras "
        f"{list(extras) or 'none'} installed; they did not:\n{done.stderr[-4000:]}"
    )


def test_every_page_with_a_ddp_script_ends_it_with_exit_ddp() -> None:
    """torch's gloo threads can abort a finished rank at shutdown (pytorch#190489): every page
    whose code starts a process group shows the line that avoids it."""
    ddp = [p for p in FILES if "init_process_group(" in p.read_text()]
    assert ddp, "no page starts a process group: this test checks nothing"
    assert [p.name for p in ddp if "seekdata.exit_ddp()" not in p.read_text()] == []
    section = (ROOT / "docs" / "ddp-checkpointing.md").read_text()
    assert "## A DDP job that aborts at its end" in section
    assert "terminate called without an active exception" in section
