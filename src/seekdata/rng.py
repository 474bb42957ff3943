"""Counter-based randomness: every random number is a pure function of counters.

The rules
---------
Nothing random in seekdata is *stateful*. Each random decision is derived from a tuple of
counters. The one key primitive is :func:`derive_key` (:func:`key_words` unchecked): numpy
``SeedSequence`` hashes the tuple into 64-bit words, never arithmetic such as
``seed + epoch``. Where a per-element key would cost a hash per sample, the words are spread
over the element with :func:`mix_keyed` (splitmix64's finaliser, :func:`mix64`, under two key
words). Global RNG is set in one place, :func:`seed_globals`, from a row of seeds.

Every stream, with its counters (:data:`STREAMS`; docs/randomness.md shows the same table)::

{streams}

The sample key leaves out rank and worker on purpose: the same sample gets the same
augmentation whichever rank or worker loads it, so world size and ``num_workers`` can change
at resume without changing the data stream.

Data-side streams carry a domain tag (:data:`ORDER`, :data:`SAMPLE`, :data:`BATCH`), so a
sample key can never collide with a user's own tuple such as ``(seed, step, rank)``.

Public entry points: :func:`numpy_generator` and :func:`torch_generator` for any counter
tuple; :func:`sample_generator` for a sample's stream outside a loader; :func:`sample_rng`
for the current sample's stream inside a loader's fetch; :func:`batch_generator` for a
batch transform's stream. The rest is the loader's machinery, documented for readers.

The implementation lives in :mod:`seekdata._core.streams` (the streams and their table) and
:mod:`seekdata._core.rngkeys` (key derivation); this module only re-exports.
"""

from __future__ import annotations

from seekdata._core.streams import (
    BATCH,
    ORDER,
    READ,
    SAMPLE,
    STEP,
    STREAMS,
    Stream,
    batch_generator,
    batch_seeds,
    derive_key,
    global_seeds,
    mix_keyed,
    numpy_generator,
    read_generator,
    read_seeds,
    sample_generator,
    sample_rng,
    sample_scope,
    seed_globals,
    torch_generator,
)

__all__ = [
    "BATCH",
    "ORDER",
    "READ",
    "SAMPLE",
    "STEP",
    "STREAMS",
    "Stream",
    "batch_generator",
    "batch_seeds",
    "derive_key",
    "global_seeds",
    "mix_keyed",
    "numpy_generator",
    "read_generator",
    "read_seeds",
    "sample_generator",
    "sample_rng",
    "sample_scope",
    "seed_globals",
    "torch_generator",
]

__doc__ = (__doc__ or "").replace(
    "{streams}", "\n".join(f"    {s.decision}: {s.counters}  [{s.code}]" for s in STREAMS)
)
