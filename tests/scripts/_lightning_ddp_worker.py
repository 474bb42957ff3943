"""Lightning DDP (2 ranks, gloo, CPU) over a seekdata loader: test_integration_lightning.py.

``python _lightning_ddp_worker.py <out.json> <ckpt_dir> <checkpoint|none>``: Lightning's own
launcher starts rank 1 by re-running this script. With the default
``use_distributed_sampler=True`` Lightning rebuilds the loader around a sampler per rank. Rank 0
writes ``<out.json>``, rank 1 ``<out>.rank1.json``: the labels (= dataset indices) of every batch
it trained on, each step's exact loss, and the final parameters.
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
        return x, torch.tensor(float(i))


class Net(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
        )
        self.seen: list[list[float]] = []
        self.losses: list[str] = []

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        self.seen.append(y.tolist())
        loss = (self.net(x).squeeze(-1) - y / 24).square().mean()
        self.losses.append(loss.item().hex())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    out, ckpt_dir, checkpoint = sys.argv[1:4]
    torch.manual_seed(0)
    model = Net()
    loader = seekdata.StatefulDataLoader(Noisy(), batch_size=4, shuffle=True, seed=0)
    trainer = lightning.Trainer(
        max_epochs=2,  # 3 steps an epoch: 24 samples, 2 ranks of 4
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            StepRNGCallback(seed=0),
            ModelCheckpoint(
                dirpath=ckpt_dir, every_n_train_steps=2, save_top_k=-1, filename="{step}"
            ),
        ],
    )
    trainer.fit(model, loader, ckpt_path=None if checkpoint == "none" else checkpoint)
    train = trainer.train_dataloader
    params = [v.hex() for p in model.parameters() for v in p.detach().flatten().tolist()]
    rank = trainer.global_rank
    with open(out if rank == 0 else f"{out[: -len('.json')]}.rank{rank}.json", "w") as f:
        json.dump({"loader": type(train).__name__, "seen": model.seen, "losses": model.losses,
                   "params": params}, f)  # fmt: skip
    if torch.distributed.is_initialized():
        torch.distributed.barrier()  # rank 0 returns to the test only once rank 1 has written
        torch.distributed.destroy_process_group()
    if trainer.global_rank != 0:  # rank 0 is the launcher: it exits normally, after rank 1
        seekdata.exit_ddp()


if __name__ == "__main__":
    main()
