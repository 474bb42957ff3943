"""One rank of a gloo job for tests/test_preemption.py: ``python _train_preempt_worker.py TMP``.

Trains (a trivial step) until PreemptionHandler.should_stop() agrees to stop, checkpoints that
step on rank 0, loads it on every rank and reports. The test sends the signal to one rank only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from seekdata import exit_ddp
from seekdata.checkpoint import load_on_every_rank, save_on_rank0
from seekdata.preemption import PreemptionHandler
from seekdata.training import set_step_rng

MAX_STEPS = 10**7  # a bound for the loop; the test's timeout ends a job that never stops


def main() -> None:
    tmp = Path(sys.argv[1])
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    step = 0
    with PreemptionHandler() as preemption:
        (tmp / f"ready{rank}").write_text(str(os.getpid()))  # the handler is installed
        while step < MAX_STEPS:
            set_step_rng(0, step)
            model(torch.ones(1, 4))
            step += 1
            if preemption.should_stop():
                break
        path = save_on_rank0({"step": step, "by": rank}, tmp / "preempted.pt")
        saved = load_on_every_rank(path)
        received = preemption.received
    result = {
        "stopped_at": step,
        "received": None if received is None else received.name,
        "checkpoint_step": saved["step"],
        "checkpoint_by": saved["by"],
        "restored": signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
    }
    dist.destroy_process_group()
    (tmp / f"result{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    exit_ddp()  # skips finalization, where torch's gloo threads can abort (pytorch#190489)
