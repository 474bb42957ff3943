"""GPU check of the accelerate integration (needs CUDA; not collected by pytest): batches placed
on CUDA by prepare, resume bit-identical with CUDA Dropout and 4 -> 2 workers. Run:
`python tests/gpu_accelerate_check.py` on a GPU node."""

import json
import sys

import torch
from accelerate import Accelerator

import seekdata


class Noisy(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.full((16,), i / 64) + 0.1 * torch.randn(16)
        return {"x": x, "labels": torch.tensor(float(i % 2))}


def model_with_dropout():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.Dropout(0.5), torch.nn.Linear(64, 1)
    )


def run(steps, workers, resume_from=None, save_at=None):
    accelerator = Accelerator()
    model = model_with_dropout()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = seekdata.StatefulDataLoader(
        Noisy(), batch_size=8, shuffle=True, seed=0, num_workers=workers, pin_memory=True
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert type(loader) is seekdata.StatefulDataLoader
    step, losses, devices = 0, [], set()
    if resume_from is not None:
        accelerator.load_state(resume_from)
        step = save_at
    while step < steps:
        for batch in loader:
            devices.add(str(batch["x"].device))
            loss = (model(batch["x"]).squeeze(-1) - batch["labels"]).square().mean()
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            losses.append(loss.detach().cpu())
            step += 1
            if step == save_at and resume_from is None:
                accelerator.save_state("/tmp/acc_ckpt")
            if step == steps:
                break
    params = [p.detach().cpu() for p in accelerator.unwrap_model(model).parameters()]
    return losses, params, devices


out = {"torch": torch.__version__, "cuda": torch.cuda.get_device_name(0)}
full, p_full, dev = run(20, workers=4, save_at=11)  # 8 batches an epoch: 11 is mid-epoch 1
rest, p_rest, dev2 = run(20, workers=2, resume_from="/tmp/acc_ckpt", save_at=11)
out["devices"] = sorted(dev | dev2)
out["losses_equal"] = all(torch.equal(a, b) for a, b in zip(full[11:], rest, strict=True))
out["params_equal"] = all(torch.equal(a, b) for a, b in zip(p_full, p_rest, strict=True))
out["n_resumed_steps"] = len(rest)
print(json.dumps(out))
ok = out["losses_equal"] and out["params_equal"] and out["devices"] == ["cuda:0"]
sys.exit(0 if ok else 1)
