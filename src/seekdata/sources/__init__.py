"""Where samples come from: file-backed sources and the I/O beneath them.

- :mod:`seekdata.sources.remote`: byte-range reads of objects in S3, GCS, Azure, plain
  HTTP(S) and the Hugging Face Hub, with index storage, a bounded cache, retries and change
  detection; every file-backed source reads remote URLs through it.
- :mod:`seekdata.sources.parquet`: rows of Parquet files, row groups as shards (public face:
  :mod:`seekdata.parquet`).
"""
