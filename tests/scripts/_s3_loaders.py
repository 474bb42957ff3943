"""Several 2-worker loaders over ``s3://``, one after another, in one script: what a user's
script does. Test infrastructure (tests/sources/remote/test_clients.py reads its stderr, which
must hold no traceback: not even one printed by a client's teardown that nothing raised).

A worker inherits the clients its parent made (building a dataset reads), and must never tear
them down on its own event loop, which is not theirs. When they are collected is up to Python's
cyclic garbage collector — whichever thread allocates at the time, the client's event-loop
thread among them; each batch here forces one collection on that thread, as its allocations
would at random (``collect_on_the_client_loop``; the workers make no other), so the test is
deterministic.

Usage: ``python tests/scripts/_s3_loaders.py ENDPOINT BUCKET``: the tar shards and token files
of ``tests/helpers/remote_corpus.py``, under ``s3://BUCKET/tar/`` and ``s3://BUCKET/windows/``.
"""

from __future__ import annotations

import gc
import pathlib
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # tests.helpers

from torch.utils.data import default_collate

import seekdata
from seekdata import _servers
from tests.helpers import remote_corpus as corpus


def collect_on_the_client_loop() -> None:
    """A collection on the thread that runs this process's clients' event loop (fsspec's), and
    another once what it started has run."""
    import asyncio

    import fsspec.asyn

    async def collect() -> None:
        gc.collect()
        await asyncio.sleep(0.05)
        gc.collect()

    fsspec.asyn.sync(fsspec.asyn.get_loop(), collect)


def no_collection_but_ours(worker_id: int) -> None:
    gc.disable()  # collections happen only where collect_on_the_client_loop makes them


def collating(collate: Any) -> Any:
    def collate_and_collect(samples: list[Any]) -> Any:
        collect_on_the_client_loop()
        return collate(samples)

    return collate_and_collect


def main() -> None:
    endpoint, bucket = sys.argv[1], sys.argv[2]
    options = _servers.s3_options(_servers.Server(endpoint, None))  # type: ignore[arg-type]
    batches = 0
    for kind in ("tar", "windows"):
        urls = corpus.pattern(kind, f"s3://{bucket}/{kind}")
        ds = corpus.dataset(kind, urls, storage_options=options)
        ds[0]  # this process reads too: its own clients, then the workers' after fork
        sampler = seekdata.DistributedSampler(ds, 1, 0, seed=corpus.SEED)
        collate = corpus.collate_tar if kind == "tar" else default_collate
        loader = seekdata.StatefulDataLoader(
            ds,
            batch_size=8,
            sampler=sampler,
            num_workers=2,
            collate_fn=collating(collate),
            worker_init_fn=no_collection_but_ours,
        )
        for _ in loader:
            batches += 1
        del loader, ds
        gc.collect()
    print("batches", batches, flush=True)


if __name__ == "__main__":
    main()
