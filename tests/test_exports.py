"""The public surface is exactly seekdata.__all__, sorted (a change here is an API change)."""

from __future__ import annotations

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
