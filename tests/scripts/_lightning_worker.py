"""A small Lightning run for tests/integrations/test_lightning.py, in a fresh process.

``python _lightning_worker.py <out.json> <ckpt_dir> <num_workers> <checkpoint|none>`` fits a
Dropout module for two epochs of 6 steps over a seekdata loader with random augmentation in
``__getitem__``, with ``seekdata.integrations.lightning.StepRNGCallback`` and a checkpoint every
3 steps; it writes each step's exact loss (float.hex) and the final parameters to ``out.json``.

``... <checkpoint|none> hook [reload]``: the LightningModule's ``train_dataloader()`` builds the
loader (its own ``seekdata.DistributedSampler``, a custom collate_fn that adds each sample's id;
``reload``: a new one every epoch, ``reload_dataloaders_every_n_epochs=1``) and ``fit`` gets no
loader; ``out.json`` then also has every batch's sample ids (``seen``) and a digest of its
augmented inputs (``digests``).
"""

from __future__ import annotations

import hashlib
import json
import sys

import lightning
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

import seekdata
from seekdata.integrations.lightning import StepRNGCallback


class Noisy(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((4,), i / 24) + 0.1 * torch.randn(4)  # augmentation via global RNG
        return x, torch.tensor(float(i % 3))


class Net(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
        )
        self.losses: list[str] = []

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = (self.net(x).squeeze(-1) - y).square().mean()
        self.losses.append(loss.item().hex())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def collate(samples: list[tuple[int, tuple[torch.Tensor, torch.Tensor]]]) -> dict:
    """A user's collate_fn: the batch also says which samples it holds."""
    return {
        "ids": [i for i, _ in samples],
        "x": torch.stack([x for _, (x, _) in samples]),
        "y": torch.stack([y for _, (_, y) in samples]),
    }


class Tagged(Noisy):
    def __getitem__(self, i: int) -> tuple[int, tuple[torch.Tensor, torch.Tensor]]:  # type: ignore[override]
        return i, super().__getitem__(i)


class OwnLoader(Net):
    """The module builds its loader in ``train_dataloader()``."""

    def __init__(self, workers: int) -> None:
        super().__init__()
        self.workers = workers
        self.seen: list[list[int]] = []
        self.digests: list[str] = []
        self.built = 0  # loaders train_dataloader() built in this process

    def train_dataloader(self) -> seekdata.StatefulDataLoader:
        self.built += 1
        dataset = Tagged()
        return seekdata.StatefulDataLoader(
            dataset,
            batch_size=4,
            sampler=seekdata.DistributedSampler(dataset, shuffle=True, seed=7),
            collate_fn=collate,
            num_workers=self.workers,
            seed=7,
        )

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:  # type: ignore[override]
        self.seen.append(batch["ids"])
        self.digests.append(hashlib.sha256(batch["x"].numpy().tobytes()).hexdigest())
        return super().training_step((batch["x"], batch["y"]), batch_idx)


def main() -> None:
    out, ckpt_dir, workers, checkpoint = sys.argv[1:5]
    hook = "hook" in sys.argv[5:]
    torch.manual_seed(0)
    model = OwnLoader(int(workers)) if hook else Net()
    loader = None
    if not hook:
        loader = seekdata.StatefulDataLoader(
            Noisy(), batch_size=4, shuffle=True, num_workers=int(workers), seed=0
        )
    # mid-epoch checkpoints every 3 steps, and one at each epoch's end (on_train_epoch_end)
    every_3 = ModelCheckpoint(
        dirpath=ckpt_dir, every_n_train_steps=3, save_top_k=-1, filename="{step}"
    )
    at_end = ModelCheckpoint(
        dirpath=ckpt_dir, every_n_epochs=1, save_top_k=-1, filename="end-{epoch}"
    )
    trainer = lightning.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[StepRNGCallback(seed=0), every_3, at_end],
        reload_dataloaders_every_n_epochs=int("reload" in sys.argv[5:]),
    )
    trainer.fit(model, loader, ckpt_path=None if checkpoint == "none" else checkpoint)
    params = [v.hex() for p in model.parameters() for v in p.detach().flatten().tolist()]
    with open(out, "w") as f:
        record = {"losses": model.losses, "params": params}
        if hook:
            record.update(seen=model.seen, digests=model.digests, built=model.built)
        json.dump(record, f)


if __name__ == "__main__":
    main()
