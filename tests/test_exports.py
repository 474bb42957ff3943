"""The public surface is exactly seekdata.__all__, sorted (a change here is an API change)."""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

import seekdata


def test_all_is_sorted_and_complete() -> None:
    assert list(seekdata.__all__) == sorted(seekdata.__all__)
    public = {n for n in dir(seekdata) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(seekdata, n)).__name__ == "module"}
    assert public - modules == set(seekdata.__all__) - {"__version__"}
    for name in seekdata.__all__:
        assert getattr(seekdata, name) is not None


def test_version_has_one_source() -> None:
    """pyproject.toml reads the version from seekdata.__version__; the installed metadata agrees."""
    import importlib.metadata

    assert importlib.metadata.version("seekdata") == seekdata.__version__


# --- every public namespace: a sorted __all__ that lists what it exposes -----------------------

NAMESPACES = [
    "seekdata",
    "seekdata.checkpoint",
    "seekdata.integrations.accelerate",
    "seekdata.integrations.lightning",
    "seekdata.integrations.transformers",
    "seekdata.order",
    "seekdata.parquet",
    "seekdata.preemption",
    "seekdata.remote",
    "seekdata.rng",
    "seekdata.testing",
    "seekdata.tokens",
    "seekdata.training",
    "seekdata.transforms",
    "seekdata.wds",
]
SRC = pathlib.Path(__file__).parent.parent / "src"


def _exposed(name: str) -> set[str]:
    """Public names a namespace defines: its top-level functions, classes and assignments, and
    for a package the names it imports from its own private modules (``pkg._x``)."""
    path = pathlib.Path(importlib.import_module(name).__file__ or "")
    out: set[str] = set()
    package = path.name == "__init__.py"

    def private(module: str | None) -> bool:
        return (module or "").startswith(name + "._")

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif package and isinstance(node, ast.ImportFrom) and private(node.module):
            out |= {a.asname or a.name for a in node.names}
    return {n for n in out if not n.startswith("_")}


@pytest.mark.parametrize("name", NAMESPACES)
def test_each_namespace_lists_what_it_exposes_in_a_sorted_all(name: str) -> None:
    module = importlib.import_module(name)
    names = list(module.__all__)
    # sorted as ruff's RUF022 sorts: CONSTANTS, then Classes, then the rest
    key = lambda n: (0 if n.isupper() else 1 if n[:1].isupper() else 2, n)  # noqa: E731
    assert names == sorted(set(names), key=key), f"{name}.__all__ must be sorted, no repeats"
    assert [n for n in names if not hasattr(module, n)] == []
    assert sorted(_exposed(name) - set(names)) == [], f"{name} exposes names not in __all__"


def test_implementation_modules_are_private() -> None:
    """A module under seekdata/ is a public namespace, a package of them, a tool, or _private."""
    public = {n.split(".", 1)[1].split(".")[0] for n in NAMESPACES if "." in n}
    # sources/: implementation packages by domain (DESIGN.md's layout), behind public faces
    allowed = public | {"integrations", "tools", "demo", "loader", "sampler", "state", "sources"}
    names = {p.stem for p in (SRC / "seekdata").iterdir() if p.suffix == ".py" or p.is_dir()}
    assert sorted(n for n in names - allowed if not n.startswith("_")) == []


def _imports(path: pathlib.Path, module: str) -> set[str]:
    """seekdata modules that ``path`` imports, anywhere in it (lazy imports included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] == "seekdata"}


def _graph() -> dict[str, set[str]]:
    files = {}
    for path in (SRC / "seekdata").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return {name: _imports(path, name) & set(files) - {name} for name, path in files.items()}


def test_no_import_circles_among_seekdata_modules() -> None:
    """Lazy imports count too: a circle through a function-level import is still a circle
    (cli <-> inspection was one). A package's own __init__ re-exporting is not an edge back."""
    graph = _graph()
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):  # importing a submodule loads its package first
                continue
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_core_imports_neither_the_tools_nor_the_integrations() -> None:
    code = (
        "import sys\n"
        "import seekdata, seekdata.rng, seekdata.order, seekdata.sampler, seekdata.loader\n"
        "import seekdata.state, seekdata.checkpoint, seekdata.wds, seekdata.transforms\n"
        "import seekdata.training, seekdata.preemption, seekdata.testing, seekdata.tokens\n"
        "print(sorted(m for m in sys.modules if m.startswith(('seekdata.tools', "
        "'seekdata.integrations', 'accelerate', 'transformers', 'lightning'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_transforms_take_their_streams_from_rng_not_from_the_loaders_internals() -> None:
    graph = _graph()
    transforms = [name for name in graph if name.split(".")[:2] == ["seekdata", "transforms"]]
    assert transforms and all("seekdata._fetch" not in graph[name] for name in transforms)
    # the orders and training-side streams derive from the key primitive, not the loader
    assert all("seekdata._keys" in graph[n] for n in ("seekdata.order", "seekdata.training"))
    assert all("seekdata._fetch" not in graph[n] for n in ("seekdata.order", "seekdata.training"))


# --- the path of one batch ------------------------------------------------------------------


def _first_batch_path() -> list[tuple[str, str]]:
    """(caller file, callee) for every call that enters another seekdata file on the way from
    iter(loader) to the first batch handed out, its cursor update included (num_workers=0, the
    loader's own shuffled sampler)."""
    root = str(pathlib.Path(seekdata.__file__).parent)
    loader = seekdata.StatefulDataLoader(list(range(64)), batch_size=4, shuffle=True, seed=1)
    path: list[tuple[str, str]] = []

    def profile(frame, event, arg) -> None:
        callee = frame.f_code.co_filename
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        inside = callee.startswith(root) and caller.startswith(root)
        if event == "call" and callee != caller and inside:
            rel = pathlib.Path(callee).relative_to(root).as_posix()
            path.append((pathlib.Path(caller).relative_to(root).as_posix(), rel))

    sys.setprofile(profile)
    try:
        next(iter(loader))
    finally:
        sys.setprofile(None)
    return path


def test_one_batch_reaches_the_cursor_in_few_hops_and_only_the_engine_moves_it() -> None:
    """The control path of a batch (calls into the key primitive and global-RNG seeding are
    leaves, not counted) stays short: 34 calls entered another file before the plan became a
    value and the engine the cursor's one writer, 23 after."""
    path = _first_batch_path()
    leaves = ("_keys.py", "_globalrng.py")
    control = [(a, b) for a, b in path if b not in leaves]
    assert len(control) <= 23, control
    assert {a for a, b in path if b == "_cursor.py"} == {"_engines/seekable.py"}


def test_no_private_name_is_imported_across_modules() -> None:
    """Private modules (``seekdata._keys``) are imported by name; a private name inside one
    (``_source``, ``_adopt``) is that module's own: another module that needs it gets a
    public name for it."""
    root = pathlib.Path(seekdata.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("seekdata"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                # "from seekdata import _keys" imports a module: allowed
                modules = [n for n in private if (root / f"{n}.py").exists() or (root / n).is_dir()]
                if node.module == "seekdata":
                    private = [n for n in private if n not in modules]
                elif node.module.count(".") >= 1:
                    base = root.joinpath(*node.module.split(".")[1:])
                    private = [n for n in private if not (base / f"{n}.py").exists()]
                found += [f"{path.relative_to(root)}: {node.module}.{n}" for n in private]
    assert found == []
