"""One rank of a DDP run over token data, for the elastic test in
tests/sources/tokens/test_tokens.py (gloo).

python _tokens_worker.py KIND MODE BATCH STEPS OUT CKPT CORPUS
KIND: "packed" (PackedDocuments), "windows" (TokenWindows) or "mixture" (both, weights 3:1).
MODE: "full" runs STEPS global steps; "save" runs STEPS steps and saves a checkpoint to CKPT;
"resume" loads CKPT and runs until global step STEPS. Rank 0 writes, per step run, the rows of
the global batch (input_ids, labels and position_ids of every rank, sorted) to OUT (JSON).
"""

from __future__ import annotations

import json
import pathlib
import sys

import torch.distributed as dist

import seekdata
from seekdata import exit_ddp
from seekdata.tokens import PackedDocuments, TokenWindows

SEQ_LEN, EOS = 16, 1


def dataset(kind: str, corpus: pathlib.Path) -> tuple[object, bool]:
    """The dataset, and whether the sampler shuffles it (a Mixture shuffles itself)."""
    files = sorted(str(p) for p in corpus.glob("*.bin"))
    if kind == "packed":
        return PackedDocuments(files, SEQ_LEN, eos_id=EOS), True
    if kind == "windows":
        return TokenWindows(files, SEQ_LEN, eos_id=EOS), True
    packed = PackedDocuments(files[:1], SEQ_LEN, eos_id=EOS)
    windows = TokenWindows(files[1:], SEQ_LEN, eos_id=EOS)
    return seekdata.Mixture([packed, windows], [3, 1], length=48, seed=4), False


def main() -> None:
    kind, mode = sys.argv[1], sys.argv[2]
    batch, steps = int(sys.argv[3]), int(sys.argv[4])
    out, ckpt, corpus = sys.argv[5], sys.argv[6], pathlib.Path(sys.argv[7])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds, shuffle = dataset(kind, corpus)
    sampler = seekdata.DistributedSampler(ds, world, rank, shuffle=shuffle, seed=3)
    loader = seekdata.StatefulDataLoader(ds, batch_size=batch, sampler=sampler, seed=3)
    step = 0
    if mode == "resume":
        saved = seekdata.checkpoint.load_on_every_rank(ckpt)
        loader.load_state_dict(saved["loader"])  # another world size: the same global batch
        step = saved["step"]
    records = []
    epoch = loader.state_dict()["epoch"]
    while step < steps:
        loader.set_epoch(epoch)
        for b in loader:
            rows = [
                [b["input_ids"][r].tolist(), b["labels"][r].tolist(), b["position_ids"][r].tolist()]
                for r in range(len(b["input_ids"]))
            ]
            gathered: list = [None] * world
            dist.all_gather_object(gathered, rows)
            records.append({"step": step, "rows": sorted(r for part in gathered for r in part)})
            step += 1
            if step == steps:
                break
        epoch += 1
    if mode == "save":
        seekdata.checkpoint.save_on_rank0({"loader": loader.state_dict(), "step": step}, ckpt)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(records, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
