"""How long a script with a live loader takes to end, by exit path: seekdata vs torch.

    python benchmarks/exit.py [--rounds 3] [--out FILE] [--quick]

Each case is a real process (2 workers, persistent or not) that iterates a few batches and then
ends: normally with the iterator alive, by an exception, by ``sys.exit(3)``, or by Ctrl-C
(SIGINT) while iterating. The figure is the wall time from the start of the process to its
end, median over ``--rounds`` rounds, the loaders in a shuffled order per round (each process
ends, its workers with it, before the next starts). A process still running after 60 s is
killed and reported as a hang. Prints a table, writes JSON and a plot beside it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import _harness as H  # benchmarks/ is on sys.path when a script here runs

BOUND = 60.0
CASES = ("end, iterator alive", "exception", "sys.exit(3)", "Ctrl-C while iterating")
LOADERS = ("seekdata", "torch")

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import torch
    import seekdata

    loader_kind, case, persistent = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            return torch.tensor([i])

    kw = dict(batch_size=4, num_workers=2, persistent_workers=persistent)
    if loader_kind == "seekdata":
        loader = seekdata.StatefulDataLoader(Data(), shuffle=True, seed=0, **kw)
    else:
        loader = torch.utils.data.DataLoader(Data(), shuffle=True, **kw)
    it = iter(loader)
    for _ in range(3):
        next(it)
    if case == "exception":
        raise RuntimeError("a bug in the training step")
    if case == "sys.exit(3)":
        sys.exit(3)
    if case.startswith("Ctrl-C"):
        print("iterating", flush=True)
        while True:
            for batch in loader:
                time.sleep(0.001)
    """
)


def run_case(loader: str, case: str, persistent: bool) -> float:
    """Seconds from start to end of one process (BOUND * 2 when it hung and was killed)."""
    args = [sys.executable, "-c", SCRIPT, loader, case, "1" if persistent else "0"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        if case.startswith("Ctrl-C"):
            assert proc.stdout is not None
            proc.stdout.readline()  # "iterating": the loop runs
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=BOUND)
        return time.perf_counter() - start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 2 * BOUND


def main() -> None:
    parser = H.script_parser(__doc__.splitlines()[0], H.RESULTS / "exit.json")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every case per loader")
    args = parser.parse_args()
    cases = CASES[:2] if args.quick else CASES
    rounds = 1 if args.quick else args.rounds
    times: dict[tuple[str, str, bool], list[float]] = {}
    for _ in range(rounds):
        for case in cases:
            for persistent in (False, True):
                order = list(LOADERS)
                random.shuffle(order)
                for loader in order:
                    t = run_case(loader, case, persistent)
                    times.setdefault((loader, case, persistent), []).append(t)
    rows = []
    for case in cases:
        for persistent in (False, True):
            row: dict[str, object] = {"case": case, "persistent_workers": persistent}
            for loader in LOADERS:
                runs = times[(loader, case, persistent)]
                med = H.median(runs)
                row[f"{loader}_s"] = med if med < BOUND else float("inf")
                row[f"{loader}_hangs"] = sum(t >= BOUND for t in runs)
            rows.append(row)
    columns = ["case", "persistent_workers"]
    columns += [f"{loader}_{what}" for loader in LOADERS for what in ("s", "hangs")]
    print(H.table(rows, columns))
    H.write(args.out, "exit", rows, rounds=rounds, bound_s=BOUND)
    labels = [f"{r['case']}{' (persistent)' if r['persistent_workers'] else ''}" for r in rows]
    for loader in LOADERS:
        values = [min(float(r[f"{loader}_s"]), BOUND) for r in rows]  # type: ignore[arg-type]
        out = args.out.with_name(f"{args.out.stem}-{loader}.png")
        try:
            H.bar_plot(out, f"{loader}: process start to end (s)", labels, values, "s")
        except ImportError:
            print("matplotlib is not installed: no plot")


if __name__ == "__main__":
    main()
