"""HF Trainer under DDP (2 gloo ranks, CPU), for tests/integrations/test_transformers.py.

``python _transformers_ddp_worker.py <tmp> <phase> <checkpoint|none> [own]``, started once per
rank by ``tests._ckpt_launch.gloo_job`` (RANK, WORLD_SIZE, MASTER_ADDR set): two epochs of 24
samples, 4 a rank per step (3 steps an epoch), a checkpoint every 2 steps under
``<tmp>/full/run``, through ``seekdata.integrations.transformers.Trainer``. Each rank writes
``<tmp>/<phase>/result<rank>.json``: the dataset indices of every batch it trained on, each
step's exact loss and the final parameters. ``own``: ``get_train_dataloader()`` is overridden
to return the user's own loader, unprepared, sharded by its ``seekdata.DistributedSampler``
(whose rank comes from the process group the Trainer started).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import torch
from _transformers_worker import Net  # tests/ is on the launcher's PYTHONPATH
from transformers import TrainingArguments

import seekdata
from seekdata.integrations.transformers import Trainer


class Indexed(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.full((4,), i / 24) + 0.1 * torch.randn(4)  # augmentation via global RNG
        return {"x": x, "labels": torch.tensor(float(i))}


class Scaled(Net):
    """The single-process test's network, on labels 0..23 scaled to its 0..1 range."""

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return super().forward(x, labels / 24)


class Recording(Trainer):
    seen: ClassVar[list[list[int]]] = []
    losses: ClassVar[list[str]] = []

    def training_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self.seen.append([int(v) for v in inputs["labels"].tolist()])
        loss = super().training_step(model, inputs, *args, **kwargs)
        self.losses.append(loss.item().hex())
        return loss


class OwnLoader(Recording):
    def get_train_dataloader(self) -> seekdata.StatefulDataLoader:
        sampler = seekdata.DistributedSampler(self.train_dataset, shuffle=True, seed=7)
        return seekdata.StatefulDataLoader(self.train_dataset, batch_size=4, sampler=sampler)


def main() -> None:
    tmp, phase, checkpoint = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(tmp / phase / "run"),
        per_device_train_batch_size=4,
        num_train_epochs=2,
        learning_rate=0.05,
        save_strategy="steps",
        save_steps=2,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        seed=0,
        disable_tqdm=True,
    )
    trainer_class = OwnLoader if "own" in sys.argv[4:] else Recording
    trainer = trainer_class(model=Scaled(), args=args, train_dataset=Indexed())
    trainer.train(resume_from_checkpoint=None if checkpoint == "none" else checkpoint)
    rank = int(os.environ["RANK"])
    params = [v.hex() for p in trainer.model.parameters() for v in p.detach().flatten().tolist()]
    result = {"seen": trainer.seen, "losses": trainer.losses, "params": params}
    (tmp / phase / f"result{rank}.json").write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    seekdata.exit_ddp()


if __name__ == "__main__":
    main()
