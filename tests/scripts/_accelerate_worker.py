"""One rank of an accelerate job for tests/integrations/test_accelerate.py.

``python _accelerate_worker.py <tmp> full|resume <num_workers> <save_step> <steps>``: trains a
small Dropout model through ``accelerator.prepare(model, optimizer, seekdata_loader)``; ``full``
runs ``steps`` steps and calls ``accelerator.save_state`` after step ``save_step``; ``resume``
is a fresh process that loads that state and runs the rest. Each rank writes its per-step losses
(exact, as float.hex), the dataset indices it trained on and its final parameters to
``<tmp>/<phase>/result<rank>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

import seekdata

N = 24


class Noisy(torch.utils.data.Dataset):
    """Random augmentation through global RNG, as an unmodified dataset would draw it."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((4,), float(i)) / N + 0.1 * torch.randn(4)
        return torch.tensor(i), x


def main() -> None:
    tmp, phase, workers, save_step, steps = sys.argv[1:6]
    num_workers, save_step, steps = int(workers), int(save_step), int(steps)
    out = Path(tmp) / phase
    out.mkdir(exist_ok=True)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = seekdata.StatefulDataLoader(
        Noisy(), batch_size=3, shuffle=True, num_workers=num_workers, seed=7
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    ckpt = Path(tmp) / "ckpt"
    step = 0
    if phase == "resume":
        accelerator.load_state(str(ckpt))
        step = save_step
    losses, seen = [], []
    while step < steps:
        for index, x in loader:
            loss = model(x).square().mean()
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            losses.append(loss.item().hex())
            seen.append(index.tolist())
            if phase == "full" and step == save_step:
                accelerator.save_state(str(ckpt))
            if step == steps:
                break
    params = [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()]
    result = {
        "losses": losses,
        "seen": seen,
        "params": [[v.hex() for v in p] for p in params],
        "world": accelerator.num_processes,
    }
    (out / f"result{accelerator.process_index}.json").write_text(json.dumps(result))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
