"""A training script that ends while a loader with workers is alive: run by
tests/loader/test_exit.py.

``python _exit_script.py LOADER DATASET WORKERS PERSISTENT HOW [handler]`` prints the pid of
every process that loaded a sample (``pids ...``) and ``iterating`` once a batch arrived, then
ends the way HOW says. LOADER is ``seekdata`` or ``torch`` (the reference statuses);
``handler`` installs a :class:`seekdata.PreemptionHandler` first, as a SLURM job does;
``lookahead`` passes ``device="cpu", device_prefetch=2`` (batches pulled ahead of the step);
``thread`` passes ``worker_method="thread"`` (the workers are threads of this process; the
script prints ``threads N``, the thread workers alive once a batch arrived). HOW ``sigterm``
iterates until a SIGTERM: with ``handler`` it stops at the handler's ``should_stop()``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch

import seekdata


class Pids(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i, os.getpid()])


class IterablePids(torch.utils.data.IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return (torch.tensor([i, os.getpid()]) for i in range(start, self.n, step))


def main() -> None:
    loader_kind, dataset_kind, workers, persistent, how = sys.argv[1:6]
    handler = seekdata.PreemptionHandler() if "handler" in sys.argv[6:] else None
    n = 64 if how not in ("sigint", "sigterm") else 10**9  # a signal: one long epoch
    dataset = Pids(n) if dataset_kind == "map" else IterablePids(n)
    cls = seekdata.StatefulDataLoader if loader_kind == "seekdata" else torch.utils.data.DataLoader
    ahead: dict[str, object] = {}
    if "lookahead" in sys.argv[6:]:
        ahead.update(device="cpu", device_prefetch=2)
    if "thread" in sys.argv[6:]:
        ahead.update(worker_method="thread")
    loader = cls(
        dataset,
        batch_size=4,
        num_workers=int(workers),
        persistent_workers=persistent == "1",
        **ahead,
    )
    pids: set[int] = set()

    def seen(batch: torch.Tensor) -> None:
        new = set(batch[:, 1].tolist()) - pids
        if new:
            pids.update(new)
            print("pids", *sorted(new), flush=True)
            if "thread" in sys.argv[6:]:
                live = [t for t in threading.enumerate() if t.name.startswith("seekdata-worker")]
                print("threads", len(live), flush=True)

    if how == "end":  # the loop runs to its end; the loader (persistent workers) stays alive
        for batch in loader:
            seen(batch)
    elif how == "live":  # a live iterator at exit
        it = iter(loader)
        seen(next(it))
    elif how == "break":  # out of the loop, the iterator kept
        it = iter(loader)
        for batch in it:
            seen(batch)
            break
    elif how in ("raise", "exit"):
        for step, batch in enumerate(loader):
            seen(batch)
            if step == 2:
                if how == "raise":
                    raise RuntimeError("a bug in the training step")
                sys.exit(3)
    elif how in ("killed", "killed-caught"):  # a worker dies (the OOM killer, say)
        it = iter(loader)
        caught: list[str] = []
        try:
            try:
                for step, batch in enumerate(it):
                    seen(batch)
                    if step == 1:
                        os.kill(max(set(batch[:, 1].tolist()) - {os.getpid()}), signal.SIGKILL)
            except Exception as e:  # torch's RuntimeError, or the pipe's ConnectionResetError
                caught.append(type(e).__name__)
                if how == "killed":
                    raise
        except Exception as e:  # torch's SIGCHLD handler may raise again inside the handling
            if how == "killed":
                raise
            caught.append(type(e).__name__)
        print("caught:", caught[0], flush=True)  # the iterator stays alive
    elif how == "sigint-in-shutdown":  # Ctrl-C lands while torch stops superseded workers
        from torch.utils.data import dataloader

        stop = dataloader._MultiProcessingDataLoaderIter._shutdown_workers
        fired: list[bool] = []

        def interrupted(self) -> None:  # type: ignore[no-untyped-def]
            if not fired and not self._shutdown:
                fired.append(True)
                os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode
            stop(self)

        dataloader._MultiProcessingDataLoaderIter._shutdown_workers = interrupted  # type: ignore[method-assign]
        it = iter(loader)
        seen(next(it))
        print("iterating", flush=True)
        while True:  # each iter() supersedes the live iterator: its workers are stopped
            for batch in loader:
                seen(batch)
    elif how == "sigterm":  # iterate until the test's SIGTERM: a handler stops the loop
        it = iter(loader)
        seen(next(it))
        print("iterating", flush=True)
        for batch in it:
            seen(batch)
            if handler is not None and handler.should_stop():
                print("stopping", flush=True)
                break
            time.sleep(0.001)
    elif how == "sigint":  # iterate until the test's Ctrl-C arrives
        it = iter(loader)
        seen(next(it))
        print("iterating", flush=True)
        for batch in it:
            seen(batch)
            time.sleep(0.001)
    print("end", flush=True)


if __name__ == "__main__":
    main()
