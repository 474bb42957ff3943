"""The randomness table: every stream seekdata derives, with its counters and its code.

:data:`STREAMS` is the single source of the table in :mod:`seekdata.rng`'s docstring and in
docs/randomness.md; tests/test_rng.py checks both, and each row against the code.
"""

from __future__ import annotations

from typing import NamedTuple


class Stream(NamedTuple):
    """One row of the randomness table: a decision, the counters it is a function of, and
    the code that derives it."""

    decision: str
    counters: str
    code: str


#: Every stream seekdata derives: the single source of the table in this docstring and in
#: docs/randomness.md (tests/test_rng.py checks both, and each row against the code).
STREAMS = (
    Stream(
        "epoch order: dataset index at global position p",
        "Feistel rounds keyed by (seed, ORDER, epoch), applied to p",
        "seekdata.order.Feistel",
    ),
    Stream(
        "a sample's own stream",
        "Philox, key (seed, SAMPLE, epoch), counter (0, 0, dataset index, 0)",
        "seekdata.sample_rng(), seekdata.sample_generator",
    ),
    Stream(
        "a transform step's stream (Compose)",
        "the sample's Philox key, counter (0, 0, index, splitmix64 chain of the step path)",
        "seekdata.transforms.Compose",
    ),
    Stream(
        "global RNG while a sample is fetched",
        "key (seed, SAMPLE, epoch), mix_keyed of the dataset index",
        "seekdata.rng.global_seeds",
    ),
    Stream(
        "a batch-level transform (mixup, cutmix)",
        "(seed, BATCH, epoch, step on this rank, crc32 of the batch's indices)",
        "seekdata.rng.batch_generator",
    ),
    Stream(
        "global RNG while a batch is collated",
        "key (seed, BATCH, epoch), mix_keyed of (step, crc32 of the indices)",
        "seekdata.rng.batch_seeds",
    ),
    Stream(
        "global RNG while a batch is read (dataset.__getitems__)",
        "key (seed, READ, epoch), mix_keyed of (step, crc32 of the indices)",
        "seekdata.rng.read_seeds",
    ),
    Stream(
        "a batched read's stream (sample_rng() inside __getitems__)",
        "Philox, key (seed, READ, epoch), counter (0, step on this rank, crc32 of the indices, 0)",
        "seekdata.sample_rng(), seekdata.rng.read_generator",
    ),
    Stream(
        "an iterable dataset's worker: global RNG",
        "(seed, WORKER, epoch, rank, worker)",
        "the loader's worker_init_fn",
    ),
    Stream(
        "model-side global RNG (dropout, noise)",
        "(seed, step, rank), key words 2 to 5",
        "seekdata.set_step_rng",
    ),
    Stream(
        "model-side global RNG, keyed by the loader (step_rng=True)",
        "set_step_rng of (key (seed, STEP, epoch), batch in the epoch, rank), at each batch",
        "seekdata.StatefulDataLoader",
    ),
    Stream(
        "model-side explicit randomness",
        "(seed, step, rank) or any tuple of yours, key words 0 and 1",
        "seekdata.torch_generator, seekdata.numpy_generator",
    ),
)
