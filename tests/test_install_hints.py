"""Every install command seekdata prints or documents works from a clone: seekdata is not on
PyPI yet, so ``pip install 'seekdata[remote]'`` fails outside one (issue 35.5). An extra is
installed with ``pip install -e '.[remote]'`` in the clone; the PyPI form may follow it, said
to be for once seekdata is published."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "src" / "seekdata").rglob("*.py")),
]
#: ``seekdata[extra]`` as a package to install (not ``.[extra]``, the clone's form); in an
#: f-string, ``seekdata[{extra}]``
PYPI_FORM = re.compile(r"(?<![\w.])seekdata\[([a-z,-]+|\{extra\})\]")
#: what a PyPI form must come with: the clone's form, and when the PyPI one applies
CLONE_FORM = re.compile(r"pip install -e '\.\[([a-z,-]+|\{extra\})\]'")


def _flat(text: str) -> str:
    """Python sources' implicitly joined string literals, read as one string."""
    return re.sub(r'["\']\s*\n\s*f?["\']', "", text)


def test_every_install_command_names_the_clone_form_first() -> None:
    wrong = []
    for path in FILES:
        text = _flat(path.read_text()) if path.suffix == ".py" else path.read_text()
        for found in PYPI_FORM.finditer(text):
            before = text[max(0, found.start() - 160) : found.start()]
            after = text[found.end() : found.end() + 80]
            once = re.search(r"once\s.*?(published|PyPI)", before[-60:] + after, re.S)
            if not (CLONE_FORM.search(before) and once):
                line = text.count("\n", 0, found.start()) + 1
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {found.group()}")
    assert not wrong, (
        "these name a seekdata extra only in its PyPI form, which fails until seekdata is "
        "published; write pip install -e '.[extra]' in a clone of seekdata first (and the "
        f"PyPI form, if at all, 'once seekdata is on PyPI'): {wrong}"
    )
