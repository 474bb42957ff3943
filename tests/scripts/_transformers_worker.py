"""A small HF Trainer run for tests/integrations/test_transformers.py, in a fresh process.

``python _transformers_worker.py <out.json> <output_dir> <num_workers> <checkpoint|none> <ga>
[persistent] [own] [ignore_data_skip]``
trains a plain Dropout module with random augmentation in ``__getitem__`` (global RNG) for two
epochs of 6 batches (``ga`` batches an optimizer step), saving a checkpoint every 3 optimizer
steps (every step when ``ga`` > 1), through
``seekdata.integrations.transformers.Trainer`` — the one line a Trainer script changes. It
writes each step's exact loss (float.hex) and the final parameters to ``out.json``.

``own``: the Trainer subclass overrides ``get_train_dataloader()`` to return the user's own
``seekdata.StatefulDataLoader`` (its own ``seekdata.DistributedSampler``, a custom collate_fn,
a dataset wrapper adding each sample's id); ``out.json`` then also has every batch's sample ids
(``seen``) and a digest of its augmented inputs (``digests``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, ClassVar

import torch
from transformers import TrainingArguments

import seekdata
from seekdata.integrations.transformers import Trainer


class Noisy(torch.utils.data.Dataset):
    fetched = 0  # samples loaded in this process (num_workers=0)

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        Noisy.fetched += 1
        x = torch.full((4,), i / 24) + 0.1 * torch.randn(4)  # augmentation via global RNG
        return {"x": x, "labels": torch.tensor(float(i % 3))}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.drop, self.b = (
            torch.nn.Linear(4, 16),
            torch.nn.Dropout(0.5),
            torch.nn.Linear(16, 1),
        )

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.b(self.drop(self.a(x))).squeeze(-1)
        return {"loss": (out - labels).square().mean()}


class Recording(Trainer):
    losses: ClassVar[list[str]] = []
    seen: ClassVar[list[list[int]]] = []
    digests: ClassVar[list[str]] = []

    def training_step(self, model, inputs, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "ids" in inputs:  # the own loader's batches say which samples they hold
            self.seen.append(inputs.pop("ids").tolist())
            self.digests.append(hashlib.sha256(inputs["x"].numpy().tobytes()).hexdigest())
        loss = super().training_step(model, inputs, *args, **kwargs)
        self.losses.append(loss.item().hex())
        return loss


class Tagged(torch.utils.data.Dataset):
    """A user's dataset wrapper: each sample also says which one it is."""

    def __init__(self, inner: torch.utils.data.Dataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.inner[i], "id": i}


def collate(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """A user's collate_fn."""
    return {
        "x": torch.stack([s["x"] for s in samples]),
        "labels": torch.stack([s["labels"] for s in samples]),
        "ids": torch.tensor([s["id"] for s in samples]),
    }


class OwnLoader(Recording):
    """The common subclass: the Trainer trains on the loader the user builds."""

    def get_train_dataloader(self) -> seekdata.StatefulDataLoader:
        dataset = Tagged(self.train_dataset)
        loader = seekdata.StatefulDataLoader(
            dataset,
            batch_size=self.args.per_device_train_batch_size,
            sampler=seekdata.DistributedSampler(dataset, shuffle=True, seed=7),
            collate_fn=collate,
            num_workers=self.args.dataloader_num_workers,
            persistent_workers=self.args.dataloader_persistent_workers,
            seed=7,
        )
        return self.accelerator.prepare(loader)


def main() -> None:
    out, output_dir, workers, checkpoint, ga = sys.argv[1:6]
    persistent, own = "persistent" in sys.argv[6:], "own" in sys.argv[6:]
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        num_train_epochs=2,
        learning_rate=0.05,
        save_strategy="steps",
        save_steps=3 if ga == "1" else 1,
        gradient_accumulation_steps=int(ga),
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=int(workers),
        dataloader_persistent_workers=persistent,
        seed=0,
        disable_tqdm=True,
        ignore_data_skip="ignore_data_skip" in sys.argv[6:],
    )
    trainer = (OwnLoader if own else Recording)(model=Net(), args=args, train_dataset=Noisy())
    trainer.train(resume_from_checkpoint=None if checkpoint == "none" else checkpoint)
    params = [v.hex() for p in trainer.model.parameters() for v in p.detach().flatten().tolist()]
    with open(out, "w") as f:
        json.dump(
            {
                "losses": trainer.losses,
                "params": params,
                "fetched": Noisy.fetched,
                "seen": trainer.seen,
                "digests": trainer.digests,
            },
            f,
        )


if __name__ == "__main__":
    main()
