"""Real processes, gloo on 127.0.0.1: torch.distributed.checkpoint saves and loads the loader."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(script: pathlib.Path, world: int, args: list[str], timeout: float = 180) -> None:
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world),
    }
    procs = []
    try:
        for rank in range(world):
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), *[a.format(rank=rank) for a in args]],
                    env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            assert p.returncode == 0, out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_dcp_saves_and_loads_the_loader_on_two_ranks(tmp_path: pathlib.Path) -> None:
    run_ranks(HERE / "_dcp_worker.py", 2, [str(tmp_path / "ckpt"), str(tmp_path / "out{rank}.pt")])
    results = [torch.load(tmp_path / f"out{r}.pt", weights_only=True) for r in range(2)]
    assert all(r["ok"] for r in results), results
    assert results[0]["state"] == results[1]["state"]  # the state is global
    assert results[0]["state"]["world_size"] == 2 and results[0]["steps"] == 5
