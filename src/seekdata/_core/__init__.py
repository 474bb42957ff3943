"""The counter core: counters -> indices. Key derivation, the streams, the orders, the partition
of positions over ranks, the cursor, the state schema and the rules of resuming it on another
shape, growth, step-RNG seeding, and the one place that asks torch.distributed.

Nothing here imports the loader, a source, the checkpoint files, the tools or the
integrations (tests/test_exports.py checks it)."""
