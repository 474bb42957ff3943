"""Parquet rows as a seekable source: row groups as shards, footers read once.

- :mod:`.footers`: each file's footer (row groups, schema, column chunk ranges), read once;
  remote footers kept under ``index_dir``; a file's entry in the corpus manifest, from which a
  dataset is built without reading a footer (each then read when its file is first read);
- :mod:`.columns`: Arrow columns to tensors and arrays, a column at a time;
- :mod:`.rows`: :class:`ParquetRows`, the dataset.
"""

from __future__ import annotations

from seekdata.sources.parquet.rows import ParquetRows

__all__ = ["ParquetRows"]
