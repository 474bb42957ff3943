"""The public surface is exactly seekdata.__all__, sorted (a change here is an API change)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib
import re
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
    "seekdata.elastic",
    "seekdata.integrations.accelerate",
    "seekdata.integrations.lightning",
    "seekdata.integrations.transformers",
    "seekdata.order",
    "seekdata.parquet",
    "seekdata.preemption",
    "seekdata.remote",
    "seekdata.rng",
    "seekdata.sources",
    "seekdata.testing",
    "seekdata.tokens",
    "seekdata.training",
    "seekdata.transforms",
    "seekdata.wds",
]
SRC = pathlib.Path(__file__).parent.parent / "src"


def _exposed(name: str) -> set[str]:
    """Public names a namespace defines: its top-level functions, classes and assignments, and
    for a package or a face (a module that defines nothing itself) the names it imports from
    implementation modules: its own (``pkg._x``, ``pkg.x``), ``seekdata._*`` and
    ``seekdata.sources.*``."""
    path = pathlib.Path(importlib.import_module(name).__file__ or "")
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    defines = any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in tree.body)
    package = path.name == "__init__.py" or not defines

    def private(module: str | None) -> bool:
        implementation = (name + ".", "seekdata._", "seekdata.sources.")
        return (module or "").startswith(implementation)

    for node in tree.body:
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
    # sources: a package of the source families' implementation (no names of its own)
    allowed = public | {"integrations", "tools", "demo", "loader", "sampler", "state", "sources"}
    names = {p.stem for p in (SRC / "seekdata").iterdir() if p.suffix == ".py" or p.is_dir()}
    names -= {"__pycache__"}
    assert sorted(n for n in names - allowed if not n.startswith("_")) == []
    # the floors: the core, the loader's machinery, the sources, the checkpoint files
    assert {"_core", "_loader", "sources", "checkpoint"} <= names
    # a module inside an implementation package is named for its idea, without a leading _
    # (the package is private or a face already); only transforms/ keeps _modules
    for pkg in ("_core", "_loader", "sources", "checkpoint"):
        inner = [p for p in (SRC / "seekdata" / pkg).rglob("*.py") if p.stem != "__init__"]
        assert inner and [p.name for p in inner if p.stem.startswith("_")] == [], pkg


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
    assert transforms and all("seekdata._loader.fetch" not in graph[name] for name in transforms)
    # the orders and training-side streams derive from the key primitive, not the loader
    derived = ("seekdata._core.orders", "seekdata._core.steprng")
    assert all("seekdata._core.rngkeys" in graph[n] for n in derived)
    faces = ("seekdata.order", "seekdata.training")
    assert all("seekdata._loader.fetch" not in graph[n] for n in (*derived, *faces))


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
    """The control path of a batch (calls into the key primitive, global-RNG seeding and the
    argument checks are leaves, not counted) stays short: 34 calls entered another file before
    the plan became a value and the engine the cursor's one writer, 23 after."""
    path = _first_batch_path()
    leaves = ("_core/rngkeys.py", "_core/globalrng.py", "_core/checks.py")
    control = [(a, b) for a, b in path if b not in leaves]
    assert len(control) <= 23, control
    assert {a for a, b in path if b == "_core/cursor.py"} == {"_loader/engines/seekable.py"}


def test_no_private_name_is_imported_across_modules() -> None:
    """Private modules (``seekdata._core.rngkeys``) are imported by name; a private name inside one
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


def _private_reads(path: pathlib.Path) -> list[str]:
    """``x._name`` in ``path`` where ``x`` is not ``self`` or ``cls``: another object's private
    field (dunders aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or (
            isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        ):
            continue
        found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_a_mixtures_changes_talk_to_it_through_methods_not_its_private_fields() -> None:
    """sources/mixtures/changes.py read Mixture's private fields 17 times (issue 28): it reads
    its public properties (growths, segments) and returns what Mixture.changed builds."""
    root = pathlib.Path(seekdata.__file__).parent
    assert _private_reads(root / "sources" / "mixtures" / "changes.py") == []


# --- public import paths: every one imports, with the names it had (issue 28 moved the code) --

PUBLIC = {
    "seekdata": [
        "DistributedSampler", "Growth", "Mixture", "PreemptionHandler", "StateMismatchError",
        "StatefulDataLoader", "__version__", "capture_rng", "numpy_generator", "restore_rng",
        "sample_generator", "sample_rng", "set_step_rng", "torch_generator",
    ],
    "seekdata.rng": [
        "BATCH", "ORDER", "READ", "SAMPLE", "STEP", "STREAMS", "Stream", "batch_generator",
        "batch_seeds", "derive_key", "global_seeds", "mix_keyed", "numpy_generator",
        "read_generator", "read_seeds", "sample_generator", "sample_rng", "sample_scope",
        "seed_globals", "torch_generator",
    ],
    "seekdata.order": [
        "ORDERS", "Feistel", "Order", "Sequential", "Shards", "TorchRandperm", "feistel_index",
        "feistel_permute", "make_order",
    ],
    "seekdata.state": [
        "KINDS", "VERSION", "StateMismatchError", "check_dataset", "check_in_order",
        "check_one_seed", "check_resize", "check_state", "check_step", "warn_caller",
        "warn_rewind",
    ],
    "seekdata.training": [
        "RNG_FORMAT", "base_torch_seed", "capture_rng", "restore_rng", "set_step_rng",
    ],
    "seekdata.preemption": [
        "PreemptionHandler", "WorkerSignals", "exit_flag", "starting_workers",
        "stopping_workers", "worker_signals",
    ],
    "seekdata.sources": ["SeekableSource"],
    "seekdata.sources.protocol": ["SeekableSource"],
    "seekdata.testing": ["assert_exact_resume", "first_difference", "run_loop"],
    "seekdata.tokens": ["IGNORE_INDEX", "PackedDocuments", "TokenWindows"],
    "seekdata.wds": ["MAX_OPEN_FILES", "PICKLE_EXTENSIONS", "TarShards"],
    "seekdata.checkpoint": [
        "CheckpointCorruptError", "CheckpointManager", "load", "load_on_every_rank", "save",
        "save_on_rank0", "verify",
    ],
    "seekdata.loader": ["StatefulDataLoader"],
    "seekdata.sampler": ["DistributedSampler"],
    "seekdata.transforms": [
        "ColorJitter", "Compose", "CutMix", "GaussianNoise", "MixUp", "RandomApply",
        "RandomChoice", "RandomCrop", "RandomErasing", "RandomHorizontalFlip",
        "RandomResizedCrop", "RandomRotation90", "RandomVerticalFlip", "TokenMask", "Transform",
        "TransformedDataset", "batch_generator", "from_global_rng",
    ],
    "seekdata.integrations.accelerate": ["skip_first_batches"],
    "seekdata.integrations.lightning": ["StepRNGCallback"],
    "seekdata.integrations.transformers": ["STATE_FILE", "StepRNGCallback", "Trainer"],
    "seekdata.tools.cli": ["build_parser", "main"],
}  # fmt: skip
# public outside __all__, as before: the state keys (the core's), and a mixture's own record
# keys, which seekdata.state hands out from the mixture (they sit under the key it owns)
STATE_KEYS = [
    "K_BATCH_DROP_LAST", "K_BATCH_SIZE", "K_DATASET", "K_DROP_LAST", "K_ENGINE", "K_EPOCH",
    "K_EXHAUSTED", "K_GROWN", "K_KIND", "K_N", "K_ORDER", "K_ORIGIN", "K_POSITION",
    "K_SAMPLE_SEED", "K_SEED", "K_SHUFFLE", "K_SKIPS", "K_SOURCE", "K_SOURCES", "K_STEP",
    "K_UNIT", "K_VERSION", "K_WORLD_SIZE",
]  # fmt: skip
MIXTURE_KEYS = ["K_HISTORY", "K_PREFIX"]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_import_path_imports_with_the_names_it_had(name: str) -> None:
    if name.startswith("seekdata.integrations."):
        pytest.importorskip(name.rsplit(".", 1)[1])
    module = importlib.import_module(name)
    assert [n for n in PUBLIC[name] if n not in module.__all__] == []  # new names may join
    assert [n for n in PUBLIC[name] if getattr(module, n, None) is None] == []


def test_the_faces_hand_out_the_implementations_objects() -> None:
    """A face re-exports: seekdata.training.set_step_rng is the one the engines call, and
    seekdata.state.K_EPOCH the key the cursor writes."""
    import seekdata.state
    import seekdata.training
    from seekdata._core import state, steprng

    assert seekdata.training.set_step_rng is steprng.set_step_rng is seekdata.set_step_rng
    from seekdata.sources.mixtures import records

    assert sorted(k for k in vars(state) if k.startswith("K_")) == STATE_KEYS
    assert [getattr(seekdata.state, k) for k in STATE_KEYS] == [vars(state)[k] for k in STATE_KEYS]
    assert [getattr(seekdata.state, k) for k in MIXTURE_KEYS] == [
        vars(records)[k] for k in MIXTURE_KEYS
    ]


def test_the_demo_and_the_console_script_start() -> None:
    """``python -m seekdata.demo --help`` and the ``seekdata`` console script's entry point."""
    import tomllib

    pyproject = tomllib.loads((SRC.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["seekdata"] == "seekdata.tools.cli:main"
    for argv in (["-m", "seekdata.demo", "--help"], ["-m", "seekdata.tools.cli", "--help"]):
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "usage" in done.stdout, done.stderr


# --- the core: counters -> indices, and nothing above it --------------------------------------

ABOVE_THE_CORE = (
    "seekdata._loader",
    "seekdata.sources",
    "seekdata.checkpoint",
    "seekdata.tools",
    "seekdata.integrations",
    "seekdata.transforms",
    "seekdata.loader",
    "seekdata.sampler",
    "seekdata.training",
    "seekdata.preemption",
    "seekdata.testing",
)


def test_the_core_imports_nothing_above_it() -> None:
    """Every module under seekdata/_core imports only the core (lazy imports included)."""
    graph = _graph()
    core = [name for name in graph if name.startswith("seekdata._core")]
    assert len(core) > 10
    outside = {n: sorted(m for m in graph[n] if not m.startswith("seekdata._core")) for n in core}
    assert {n: m for n, m in outside.items() if m} == {}


def test_importing_the_core_loads_neither_the_loader_nor_a_source() -> None:
    """Import every core module in a fresh process without seekdata/__init__.py (which loads
    the whole package): no loader, source, training side, checkpoint, tool or integration
    comes with it, and no process group or worker starts."""
    code = (
        "import importlib, pathlib, sys, types\n"
        "import torch.distributed as dist\n"
        f"root = pathlib.Path({str(SRC / 'seekdata')!r})\n"
        "pkg = types.ModuleType('seekdata'); pkg.__path__ = [str(root)]\n"
        "sys.modules['seekdata'] = pkg\n"
        "for p in sorted((root / '_core').glob('*.py')):\n"
        "    name = '' if p.stem == '__init__' else '.' + p.stem\n"
        "    importlib.import_module('seekdata._core' + name)\n"
        "import multiprocessing\n"
        "print(sorted(m for m in sys.modules if m.startswith('seekdata')))\n"
        "print(dist.is_available() and dist.is_initialized(), multiprocessing.active_children())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, started = out.stdout.strip().splitlines()
    modules = eval(loaded)  # a printed list of str
    assert "seekdata._core.cursor" in modules and "seekdata._core.reshape" in modules
    assert [m for m in modules if m.startswith(ABOVE_THE_CORE)] == []
    assert set(modules) <= {"seekdata"} | {m for m in modules if m.startswith("seekdata._core")}
    assert started == "False []"


def test_a_seekdata_module_is_imported_only_under_its_own_name() -> None:
    """``from seekdata._core import streams as rng`` reads as the public seekdata.rng, and
    ``reshape as _statecheck`` as a module that no longer exists: a module bound to a name is
    bound to its own name, or to it with one leading underscore. Checked in the package, the
    tests and the benchmarks (the docs show users' own spellings, such as ``transforms as T``)."""
    root = SRC.parent
    wrong = []
    for folder in ("src", "tests", "benchmarks", "examples"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    bound = [(a.name, a.name.rpartition(".")[2], a.asname) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    bound = [(f"{node.module}.{a.name}", a.name, a.asname) for a in node.names]
                else:
                    continue
                for full, own, alias in bound:
                    if full.split(".")[0] != "seekdata" or alias in (None, own, f"_{own}"):
                        continue
                    if importlib.util.find_spec(full.rpartition(".")[0] or full) is None:
                        continue
                    try:
                        is_module = importlib.util.find_spec(full) is not None
                    except ModuleNotFoundError:
                        is_module = False
                    if is_module:
                        wrong.append(f"{path.relative_to(root)}:{node.lineno} {full} as {alias}")
    assert wrong == []


def test_every_module_a_docstring_names_exists() -> None:
    """A ``:mod:`` reference in the package names a module that exists (relative ones from the
    file's own package): docstrings that named modules of an older layout misled readers."""
    missing = []
    for path in (SRC / "seekdata").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        package = ".".join(parts[:-1])
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            for ref in re.findall(r":mod:`~?([\w.]+)`", line):
                name = package + ref if ref.startswith(".") else ref
                if importlib.util.find_spec(name) is None:
                    missing.append(f"{path.relative_to(SRC)}:{line_no} {ref}")
    assert missing == []
