"""Datasets that take part in exact resume, one package per family, and the I/O beneath them.
Each implements the one source protocol the loader reads, :class:`SeekableSource`
(:mod:`seekdata.sources.protocol`; docs/sources.md):

- :mod:`~seekdata.sources.mixtures`, :mod:`~seekdata.sources.tokens`,
  :mod:`~seekdata.sources.wds`: weighted mixtures, token corpora, webdataset shards;
- :mod:`seekdata.sources.parquet`: rows of Parquet files, row groups as shards (public face:
  :mod:`seekdata.parquet`);
- :mod:`seekdata.sources.remote`: byte-range reads of objects in S3, GCS, Azure, plain
  HTTP(S) and the Hugging Face Hub, with index storage, a bounded cache, retries and change
  detection; every file-backed source reads remote URLs through it.
"""

from seekdata.sources.protocol import SeekableSource

__all__ = ["SeekableSource"]
