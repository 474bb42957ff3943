"""The demos' figures: matplotlib's pyplot (the Agg backend, files only), or a note saying why
there is no plot. matplotlib is optional (the ``demo`` extra): a demo without it still runs,
compares and prints; it only draws nothing."""

from __future__ import annotations

from typing import Any

__all__ = ["NO_PLOT", "pyplot"]

NO_PLOT = (
    "no plot: matplotlib is not installed (pip install -e '.[demo]' in a clone of "
    "seekdata for the plot; pip install 'seekdata[demo]' once seekdata is on PyPI)"
)


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend; None, printing :data:`NO_PLOT`, without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(NO_PLOT)
        return None
    return plt
