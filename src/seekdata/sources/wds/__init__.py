"""Webdataset tar shards: the byte-offset index, its checks, and shard URLs."""

import importlib.util


def _missing() -> ModuleNotFoundError | None:
    """Why webdataset cannot be imported, or None: found, not imported. webdataset imports
    torch (seconds), which indexing shards never needs; the datasets import what they use of it
    when they are built."""
    try:
        found = importlib.util.find_spec("webdataset")
    except ModuleNotFoundError as exc:
        return exc
    return None if found else ModuleNotFoundError("No module named 'webdataset'", name="webdataset")


if (_why := _missing()) is not None:
    raise ImportError(
        "seekdata.wds needs the 'webdataset' extra (webdataset, braceexpand, pillow), which "
        "is not installed; pip install -e '.[webdataset]' in a clone of seekdata "
        "(pip install 'seekdata[webdataset]' once seekdata is on PyPI)"
    ) from _why
