"""Datasets that take part in exact resume, one package per family (mixtures, token corpora,
webdataset shards); each implements the one source protocol the loader reads,
:class:`SeekableSource` (:mod:`seekdata.sources.protocol`; docs/sources.md)."""

from seekdata.sources.protocol import SeekableSource

__all__ = ["SeekableSource"]
