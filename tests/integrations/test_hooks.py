"""Framework knowledge sits in one table (issue 36, item 5): seekdata.integrations.hooks lists
each framework's hooks, the loader makes one call at each event, and the loader's own files
name no framework. Needs no framework installed."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
import torch

import seekdata
from seekdata.integrations import hooks


def test_every_hook_is_for_a_known_event_and_every_event_has_a_default() -> None:
    assert hooks.HOOKS and {h.event for h in hooks.HOOKS} <= set(hooks.EVENTS)
    loader = seekdata.StatefulDataLoader(list(range(8)), batch_size=2, shuffle=True, seed=0)
    # nobody recognised: the events' defaults
    assert hooks.consult("prepared", sys._getframe(), loader) is False
    assert hooks.consult("batch_sampler_iterated", sys._getframe(), loader) is None
    foreign = torch.utils.data.SequentialSampler(range(8))
    with pytest.raises(TypeError, match="must wrap the loader's own"):
        hooks.consult("batch_sampler_rebuilt", sys._getframe(), foreign, 2, False)
    assert loader._is_accelerate_prepared is False  # read by no framework


def test_a_framework_is_consulted_only_once_imported() -> None:
    """A hook whose framework is not imported is skipped: recognise is never called."""
    called = []
    row = hooks.Hook("nothere", "prepared", ("no_such_framework_xyz",), _spy(called), _spy([]))
    saved = hooks.HOOKS
    try:
        hooks.HOOKS = (row, *saved)
        assert hooks.consult("prepared", None, object()) is False
    finally:
        hooks.HOOKS = saved
    assert called == []


def _spy(calls: list[object]) -> object:
    def f(*args: object) -> bool:
        calls.append(args)
        return True

    return f


def test_the_loader_names_no_framework_and_imports_the_table_lazily() -> None:
    """No string in the loader's code (docstrings aside) and no import names a framework; the
    table is imported at the moment it is consulted, never by importing the loader."""
    root = pathlib.Path(seekdata.__file__).parent
    named = []
    for path in [root / "loader.py", *sorted((root / "_loader").rglob("*.py"))]:
        tree = ast.parse(path.read_text())
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            text = ""
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = "" if id(node) in docs else node.value
            elif isinstance(node, ast.Import | ast.ImportFrom):
                text = " ".join([getattr(node, "module", "") or "", *(a.name for a in node.names)])
            if any(f in text.lower() for f in ("accelerate", "lightning", "transformers")):
                named.append(f"{path.name}:{node.lineno}")
    assert named == []
    code = (
        "import sys, seekdata, seekdata.loader\n"
        "loader = seekdata.StatefulDataLoader(list(range(8)), batch_size=2, shuffle=True)\n"
        "list(loader)\n"
        "before = 'seekdata.integrations.hooks' in sys.modules\n"
        "loader._is_accelerate_prepared\n"
        "print(before, 'seekdata.integrations.hooks' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
