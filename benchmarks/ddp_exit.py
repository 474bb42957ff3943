"""How often a finished 2-rank gloo DDP job dies of SIGABRT at interpreter shutdown, by how it
ends: returning from the script (after ``destroy_process_group()``) or ``seekdata.exit_ddp()``.

    python benchmarks/ddp_exit.py [--runs 20] [--out FILE] [--quick]

Each run is a real ``torchrun --nproc-per-node=2`` job on 127.0.0.1: a DDP model trains 20
steps with a backward each (the autograd context that torch's gloo threads can hold, pytorch
issue 190489), then the script ends one way or the other. The endings alternate run by run. A
run that exits non-zero with a rank killed by SIGABRT counts as an abort; any other failure,
or a job past 120 s, is reported apart. Prints a table and writes JSON.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap

import _harness as H  # benchmarks/ is on sys.path when a script here runs

ENDINGS = ("return", "exit_ddp")
SCRIPT = textwrap.dedent(
    """
    import sys
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import seekdata

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3),
                                    torch.nn.Linear(16, 2)))
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(20):
        loss = model(torch.randn(4, 8)).sum()
        optim.zero_grad(); loss.backward(); optim.step()
    dist.barrier()
    if sys.argv[1] == "exit_ddp":
        seekdata.exit_ddp()
    dist.destroy_process_group()
    """
)


def run_job(script: pathlib.Path, ending: str) -> str:
    """'ok', 'SIGABRT', 'timeout' or 'failed' for one torchrun job."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
           "--nproc-per-node=2", str(script), ending]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode == 0:
        return "ok"
    return "SIGABRT" if "(SIGABRT)" in done.stdout + done.stderr else "failed"


def main() -> None:
    p = H.script_parser(__doc__.splitlines()[0], pathlib.Path("benchmarks/results/ddp_exit.json"))
    p.add_argument("--runs", type=int, default=20, help="jobs per ending (default 20)")
    args = p.parse_args()
    runs = 2 if args.quick else args.runs
    counts = {e: {"ok": 0, "SIGABRT": 0, "failed": 0, "timeout": 0} for e in ENDINGS}
    with tempfile.TemporaryDirectory(prefix="seekdata-ddp-exit-") as tmp:
        script = pathlib.Path(tmp) / "job.py"
        script.write_text(SCRIPT)
        for i in range(runs):
            for ending in ENDINGS if i % 2 == 0 else ENDINGS[::-1]:
                counts[ending][run_job(script, ending)] += 1
                print(f"\r{i + 1}/{runs} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    rows = [{"ending": e, "runs": runs, **counts[e]} for e in ENDINGS]
    print(H.table(rows, ["ending", "runs", "ok", "SIGABRT", "failed", "timeout"]))
    H.write(args.out, "ddp_exit", rows, runs=runs)


if __name__ == "__main__":
    main()
