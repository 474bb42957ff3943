"""One rank of the 2-process gloo seed test: unseeded ranks (different torch seeds) build a
loader with seed=None; every rank must get rank 0's seed, hence one order and one stream.

Run by tests/loader/test_seed_semantics.py with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1,
MASTER_PORT.
argv: output file.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

from seekdata import exit_ddp

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
import seekdata
from tests.helpers.datasets import GlobalRNGAug


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(1000 + int(os.environ["RANK"]))  # as if each process seeded itself
    loader = seekdata.StatefulDataLoader(GlobalRNGAug(12), batch_size=4, shuffle=True)
    first = next(iter(loader))
    with open(sys.argv[1], "w") as f:
        json.dump(
            {"seed": loader.seed, "index": first["index"].tolist(), "x": first["x"].tolist()}, f
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
