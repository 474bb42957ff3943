"""Run docs pages' python blocks in a process where only some installed packages can be imported.

Reads ``{"hidden": [top-level module, ...], "hidden_distributions": [canonical name, ...],
"pages": [{"name": str, "blocks": [str, ...]}]}`` as JSON on stdin. Every import finder is
wrapped so that a hidden module is *not found*, as in an install without its distribution
(``importlib.util.find_spec`` returns None, ``import`` raises ``ModuleNotFoundError``), and a
hidden distribution has no metadata (``importlib.metadata.version`` raises). Then each page's
blocks run in order in one namespace, from a fresh temporary directory, as
``tests/test_docs.py`` runs them. Exit status 1 with the traceback of the first block that fails.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Iterator
from typing import Any


class _Hiding:
    """A meta-path finder that finds what ``finder`` finds, except hidden top-level modules
    and hidden distributions."""

    def __init__(self, finder: Any, hidden: frozenset[str], dists: frozenset[str]) -> None:
        self.finder, self.hidden, self.dists = finder, hidden, dists

    def find_distributions(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        find = getattr(self.finder, "find_distributions", None)
        for dist in [] if find is None else find(*args, **kwargs):
            name = re.sub(r"[-_.]+", "-", str(dist.metadata["Name"] or "")).lower()
            if name not in self.dists:
                yield dist

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] in self.hidden:
            return None
        find = getattr(self.finder, "find_spec", None)
        return None if find is None else find(name, path, target)

    def invalidate_caches(self) -> None:
        invalidate = getattr(self.finder, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


def main() -> int:
    job = json.load(sys.stdin)
    hidden, dists = frozenset(job["hidden"]), frozenset(job["hidden_distributions"])
    loaded = sorted(hidden & {name.partition(".")[0] for name in sys.modules})
    if loaded:
        print(f"already imported before hiding: {loaded}", file=sys.stderr)
        return 1
    sys.meta_path[:] = [_Hiding(finder, hidden, dists) for finder in sys.meta_path]
    for page in job["pages"]:
        namespace: dict[str, Any] = {"__name__": "doc_" + page["name"].removesuffix(".md")}
        with tempfile.TemporaryDirectory() as folder:
            os.chdir(folder)
            for i, body in enumerate(page["blocks"]):
                try:
                    exec(compile(body, f"{page['name']}[block {i}]", "exec"), namespace)
                except BaseException:
                    traceback.print_exc()
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
