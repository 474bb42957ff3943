"""Reading data where it lives: remote URLs for every file-backed source (docs/remote.md).

``TarShards``, ``TokenWindows``, ``PackedDocuments`` and ``ParquetRows`` accept ``s3://``,
``gs://``, ``az://``, ``http(s)://`` and ``hf://`` URLs (the ``remote`` extra) and read them
by byte range; their ``storage_options=`` carry the back-end's options and their ``cache=``
takes a :class:`Cache`, a bounded local disk cache of remote bytes.
"""

from __future__ import annotations

from seekdata.sources.remote import Cache

__all__ = ["Cache"]
