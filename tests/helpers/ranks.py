"""Start a few gloo ranks of a script on 127.0.0.1 and wait for them (never leave one behind)."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
from typing import Any

from tests.helpers.forker import Forker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(
    script: pathlib.Path,
    world: int,
    args: list[str],
    timeout: float = 180,
    forker: Forker | None = None,
) -> list[str]:
    """Run ``script`` on ``world`` ranks (forked from FORKER, which imported torch once, when
    given); every rank must exit 0. Their outputs, by rank."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world),
    }
    procs: list[Any] = []  # subprocess.Popen, or forker.Run: the same calls
    try:
        for rank in range(world):
            if forker is not None:
                argv = [str(script), *[a.format(rank=rank) for a in args]]
                rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
                procs.append(forker.popen(argv, env=rank_env))
                continue
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), *[a.format(rank=rank) for a in args]],
                    env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outputs = []
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            assert p.returncode == 0, out
            outputs.append(out)
        return outputs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
