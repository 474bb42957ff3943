"""The floor of file-backed sources, between :mod:`seekdata.sources.remote` (byte ranges of
remote objects) and the families (tar shards, token files, Parquet) that build on it:

- :mod:`.paths`: the one grammar of ``urls=`` (paths, URLs, brace patterns, lists) and of
  schemes;
- :mod:`.handles`: the per-process LRU of open files and the check that a local file did not
  change since the dataset described it;
- :mod:`.indexes`: where a file's index lives (beside it, under ``index_dir``, beside a remote
  object), written atomically, read back in one request;
- :mod:`.source`: :class:`FileSource`, the base class: one class, local or remote, with the
  protocol's ``prefetch``.
- :mod:`.processes`: the worker processes that index files in parallel, which end with the
  process that started them.

A family keeps only what is its own: tar members, token dtypes and windows, Arrow columns
(CONTRIBUTING.md, "Add a source").
"""

from __future__ import annotations

from seekdata.sources.files.handles import MAX_OPEN_FILES, OpenFiles, changed
from seekdata.sources.files.paths import expand, url_scheme

# FileSource (seekdata.sources.files.source) is not imported here: it needs torch, and the
# command line expands names and finds indexes without it
__all__ = ["MAX_OPEN_FILES", "OpenFiles", "changed", "expand", "url_scheme"]
