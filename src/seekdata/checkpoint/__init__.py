"""Atomic, verified checkpoint files; step rotation; the DDP rank-0 write.

File format
-----------
:func:`save` writes a plain ``torch.save`` zip archive whose zip *comment* is a one-line
footer::

    seekdata-checkpoint/1 sha256=<64 hex digits> size=<20 digits>

``size`` is the number of bytes before the footer and ``sha256`` their hash. A zip comment is
part of the zip format, so ``torch.load(path, weights_only=True)`` reads the file as it
reads any checkpoint; :func:`load` checks the footer first and raises
:class:`CheckpointCorruptError` when the file is truncated, extended or has any byte changed.

Atomicity
---------
The archive is written to a temporary file in the same folder
(``.<name>.<host>.<pid>.<hex>.tmp``), fsynced, renamed over ``path`` with ``os.replace`` and the
folder is fsynced: a reader sees the old file or the new one, never half of one, even if the
writer is killed. A killed writer leaves its temporary file behind; it is never mistaken for a
checkpoint, and the next save of the same file (or of any step of a
:class:`CheckpointManager`) on the same host removes it once it is provably orphaned: its name
is ours, it was written by this host, its writer's pid no longer runs, and it has not been
written to for ``_STALE_AFTER`` seconds. Anything else (another host's temp, a live write, a
user's file) is never touched.

DDP
---
:func:`save_on_rank0` writes on rank 0 while every rank waits; the wait is an ``all_reduce``
of rank 0's success, so when rank 0 fails every rank raises instead of waiting forever.
:func:`load_on_every_rank` maps tensors to the rank's own device. :class:`CheckpointManager`
does both, and keeps the last K step checkpoints of a folder.

The implementation lives in :mod:`seekdata.checkpoint.manager` (save, load, the manager), with
:mod:`~seekdata.checkpoint.files` (the atomic file format) and
:mod:`~seekdata.checkpoint.pickles` (the pickle refusal); this module only re-exports.
"""

from __future__ import annotations

# imported on first use (PEP 562): ``seekdata inspect`` reads checkpoint files through
# seekdata.checkpoint.pickles without importing torch
from typing import TYPE_CHECKING as _TYPE_CHECKING

from seekdata import _lazy

if _TYPE_CHECKING:
    from seekdata.checkpoint.manager import (
        CheckpointCorruptError,
        CheckpointManager,
        load,
        load_on_every_rank,
        save,
        save_on_rank0,
        verify,
    )

__all__ = [
    "CheckpointCorruptError",
    "CheckpointManager",
    "load",
    "load_on_every_rank",
    "save",
    "save_on_rank0",
    "verify",
]

__getattr__, __dir__ = _lazy.exports(
    __name__, globals(), {name: "seekdata.checkpoint.manager" for name in __all__}
)
