"""Token corpora for language-model pretraining: fixed windows, and packed whole documents.

Token files are flat arrays of token ids (nanoGPT's ``train.bin``, OLMo's ``.npy`` arrays, raw
``uint16``/``uint32``), read through ``np.memmap``; several files are read as their
concatenation (:mod:`seekdata.sources.tokens.files`). Both datasets are ordinary map-style datasets
whose every item is a pure function of the corpus and the arguments, so seekdata's sampler,
loader, elastic resume, :class:`seekdata.Mixture`, skips and ``seekdata verify`` apply
unchanged, and the checkpoint stays the loader's cursor.

- :class:`TokenWindows` cuts the concatenation into fixed windows (nanoGPT / OLMo style).
- :class:`PackedDocuments` packs whole documents into sequences
  (:mod:`seekdata.sources.tokens.packing`), with labels that never cross a document and
  ``position_ids`` restarting at each one.
  Document boundaries come from a one-time scan kept beside each file
  (:mod:`seekdata.sources.tokens.index`, ``seekdata index --eos-id``), or from ``document_ends``.
  See docs/tokens.md.

The implementation lives in :mod:`seekdata.sources.tokens.corpora`; this module only re-exports.
"""

from __future__ import annotations

from seekdata.sources.tokens.corpora import (
    IGNORE_INDEX,
    PackedDocuments,
    RemotePackedDocuments,
    RemoteTokenWindows,
    TokenWindows,
)

__all__ = [
    "IGNORE_INDEX",
    "PackedDocuments",
    "RemotePackedDocuments",
    "RemoteTokenWindows",
    "TokenWindows",
]
