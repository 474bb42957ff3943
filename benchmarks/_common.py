"""What every benchmark script here shares beyond the harness: its arguments, its rounds, its
JSON and its plot.

- :func:`parser`: ``--out`` (default ``results/<name>.json``), ``--quick`` and ``--rounds``;
- :func:`rounds`: each case once per round, in a new shuffled order every round (the harness's
  ``interleave``), and the median of each case's runs;
- :func:`markdown`: a table as the README and docs print it, one format per column;
- :func:`write`: ``{"meta": ..., **results}`` as JSON, ``meta`` the machine, the commit, the
  load and the arguments of the run;
- :func:`plot`: a figure beside the JSON, or a note where matplotlib is not installed.

It imports the harness (and so torch) only when :func:`rounds` or :func:`write` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
from collections.abc import Callable, Sequence
from typing import Any

RESULTS = pathlib.Path(__file__).resolve().parent / "results"

#: a column of :func:`markdown`: (key, header, format), the format a ``str.format`` pattern
#: of the row's value or a function of the whole row; a missing key prints as an empty cell
Column = tuple[str, str, "str | Callable[[dict[str, Any]], str]"]


def parser(description: str, name: str, rounds: int = 3) -> argparse.ArgumentParser:
    """The arguments every benchmark takes: ``--out``, ``--quick`` and ``--rounds``."""
    p = argparse.ArgumentParser(description=description.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, default=RESULTS / f"{name}.json",
                   help="JSON results file (a PNG is written beside it)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    p.add_argument("--rounds", type=int, default=rounds,
                   help="runs of each case, interleaved in a new random order every round; "
                   "the median is reported")  # fmt: skip
    return p


def rounds(cases: dict[str, Callable[[], float]], count: int) -> dict[str, dict[str, Any]]:
    """Run each case ``count`` times, all cases once per round in a shuffled order (drift of the
    machine hits every case alike); per case the ``median`` and all ``runs``."""
    from _harness import interleave

    runs = interleave(cases, count)
    return {name: {"median": median(values), "runs": values} for name, values in runs.items()}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def markdown(rows: list[dict[str, Any]], columns: Sequence[Column], numbers: bool = False) -> str:
    """``rows`` as a Markdown table, one line per row; ``numbers``: every column after the
    first is aligned right."""
    out = ["| " + " | ".join(header for _, header, _ in columns) + " |"]
    rules = ["---" if i == 0 or not numbers else "---:" for i in range(len(columns))]
    out.append("| " + " | ".join(rules) + " |")
    for row in rows:
        cells = []
        for key, _, fmt in columns:
            if callable(fmt):
                cells.append(fmt(row))
            else:
                cells.append(fmt.format(row[key]) if key in row else "")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def meta(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """What a figure needs beside it: the machine, the commit, the load and the arguments."""
    from _harness import machine

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "commit": machine()["seekdata_commit"],
        "args": {k: str(v) if isinstance(v, pathlib.Path) else v for k, v in vars(args).items()},
        **extra,
    }


def write(args: argparse.Namespace, results: dict[str, Any], **extra: Any) -> pathlib.Path:
    """Write ``{"meta": meta(args, **extra), **results}`` to ``args.out``; returns the path."""
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta(args, **extra), **results}, indent=1))
    return out


def plot(path: pathlib.Path, draw: Callable[[Any], Any]) -> bool:
    """Save the figure ``draw(pyplot)`` returns to ``path``; False, saying so, without
    matplotlib (the ``bench`` extra installs it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plot ({path.name}): matplotlib is not installed (pip install -e '.[bench]')")
        return False
    fig = draw(plt)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
