"""A package's public names imported on first use (PEP 562), so that importing the package
does not import torch: ``seekdata --help`` and ``seekdata inspect`` of a JSON file start fast."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose globals are ``namespace``: the
    name ``n`` is ``where[n]``'s attribute ``n`` (a module, when ``where[n]`` is
    ``package.n``), imported at the first lookup and then kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if module == f"{package}.{name}" else getattr(imported, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
