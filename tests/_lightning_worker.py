"""A small Lightning run for tests/test_integration_lightning.py, in a fresh process.

``python _lightning_worker.py <out.json> <ckpt_dir> <num_workers> <checkpoint|none>`` fits a
Dropout module for two epochs of 6 steps over a seekdata loader with random augmentation in
``__getitem__``, with ``seekdata.integrations.lightning.StepRNGCallback`` and a checkpoint every
3 steps; it writes each step's exact loss (float.hex) and the final parameters to ``out.json``.
"""

from __future__ import annotations

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


def main() -> None:
    out, ckpt_dir, workers, checkpoint = sys.argv[1:5]
    torch.manual_seed(0)
    model = Net()
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
    )
    trainer.fit(model, loader, ckpt_path=None if checkpoint == "none" else checkpoint)
    params = [v.hex() for p in model.parameters() for v in p.detach().flatten().tolist()]
    with open(out, "w") as f:
        json.dump({"losses": model.losses, "params": params}, f)


if __name__ == "__main__":
    main()
