"""The source protocol, public as :class:`seekdata.sources.SeekableSource`: what a dataset may
declare so that a loader resumes it exactly (docs/sources.md, "Write your own seekable source").

A face: the protocol and the one accessor per member live in :mod:`seekdata._core.source`,
because the core (the state checks, growth, the orders) reads the declarations and imports
nothing above it.
"""

from seekdata._core.source import SeekableSource

__all__ = ["SeekableSource"]
