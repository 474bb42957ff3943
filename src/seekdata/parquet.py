"""Rows of Parquet files, local or remote, as a seekable map-style dataset (docs/remote.md).

:class:`ParquetRows` reads the rows of many Parquet files as one dataset whose shards are the
files' row groups, so ``order="shards"`` reads a few row groups at a time while the epoch is
still shuffled, and a batch comes back as columns (tensors for numbers). Remote URLs
(``s3://``, ``gs://``, ``az://``, ``https://``, ``hf://``) need the ``remote`` extra; every
file needs ``pyarrow`` (the ``parquet`` extra).
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401 - the Parquet reader
except ImportError as exc:
    raise ImportError(
        "seekdata.parquet needs the 'parquet' extra (pyarrow), which is not installed; "
        "pip install -e '.[parquet]' in a clone of seekdata (pip install 'seekdata[parquet]' "
        "once seekdata is on PyPI)"
    ) from exc

from seekdata.sources.parquet import ParquetRows

__all__ = ["ParquetRows"]
