"""``python -m seekdata.demo --elastic``: torchrun loses a node and gets it back; the data goes on.

Two torchrun agents on 127.0.0.1 share one c10d rendezvous (``--nnodes=1:2``, 2 processes
each, gloo) and run the training script seekdata ships (``seekdata/tools/demo/elastic_train.py``,
which ``examples/elastic_train.py`` runs): global batch ÷ world size per rank, a checkpoint
every k steps. After step ``--kill-at`` one agent and all its workers are
SIGKILLed (a node lost): torchrun restarts the survivors on 2 ranks from the last checkpoint.
Once they reach step ``--back-at`` a new agent starts (a node back): torchrun restarts the job
on 4 ranks. Every step is compared with an uninterrupted 4-rank run: the samples of each global
step, and the loss. Kill and return are placed with files (the ranks hold after a step until
the story moves on), never with sleeps.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import seekdata
from seekdata.tools.demo import figures, supervisor

_CONFIG_ENV = "SEEKDATA_ELASTIC_DEMO"
_NODE_ENV = "SEEKDATA_ELASTIC_NODE"
_WORKER_MODULE = "seekdata.tools.demo.elastic"  # what torchrun starts on each rank
TOLERANCE = 1e-5  # relative: the all-reduce sums the same samples in another grouping
# torchrun's rendezvous, sized for one machine: a node whose heartbeat is 2 × 3 s late is dead,
# a round stays open 3 s for late nodes (torch's defaults: 5 × 3 s and 30 s)
RDZV_CONF = "last_call_timeout=3,keep_alive_interval=2,keep_alive_max_attempt=3"


# --- a worker: the example script, holding after a step while the story says so ----------------


def _proc_start() -> float | None:
    """This process's creation time (wall clock, 10 ms resolution) from /proc, or None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _worker() -> None:
    config = json.loads(os.environ[_CONFIG_ENV])
    run, node = Path(config["run"]), os.environ.get(_NODE_ENV, "ref")
    local = int(os.environ["LOCAL_RANK"])
    for folder in ("pids", "procs", "held"):
        (run / folder).mkdir(parents=True, exist_ok=True)
    # a record of the ranks this story started: none may outlive it (tests read these)
    (run / "pids" / f"{node}-{local}").write_text(str(os.getpid()))
    (run / "procs" / f"{os.getpid()}.json").write_text(
        json.dumps({"node": node, "local_rank": local, "created": _proc_start()})
    )
    spec = importlib.util.spec_from_file_location("elastic_train", config["script"])
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"demo --elastic: cannot load {config['script']}")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    deadline = time.monotonic() + config["timeout"]

    def hold(step: int, world: int, rank: int) -> None:
        """After ``step``: while the story's hold is at or below it, mark and wait."""
        marked = None
        while True:
            wanted = _read_hold(run)
            if wanted is None or step < wanted["step"]:
                return
            if marked != wanted:
                (run / "held" / f"{wanted['step']}-{world}-{rank}").touch()
                marked = wanted
            if time.monotonic() > deadline:
                raise TimeoutError(f"demo --elastic: rank {rank} held after step {step} too long")
            time.sleep(0.05)

    script.main(config["argv"], after_step=hold)


def _read_hold(run: Path) -> dict[str, int] | None:
    try:
        return json.loads((run / "hold.json").read_text())
    except FileNotFoundError:
        return None


def _set_hold(run: Path, step: int | None) -> None:
    tmp = run / "hold.json.tmp"
    tmp.write_text("null" if step is None else json.dumps({"step": step}))
    os.replace(tmp, run / "hold.json")  # a worker reads the old hold or the new, never half


# --- the story: agents started and killed, placed by the ranks' hold marks ---------------------


def default_script() -> Path:
    """The training script shipped beside this module (``examples/elastic_train.py`` runs it),
    so that the demo runs from an installed wheel as from a checkout."""
    return Path(__file__).resolve().with_name("elastic_train.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """torchrun agents on 127.0.0.1, each standing for a node; every process is ended on exit."""

    def __init__(self, run: Path, config: dict[str, Any], timeout: float, rdzv_conf: str) -> None:
        self.run, self.config, self.timeout, self.rdzv_conf = run, config, timeout, rdzv_conf
        self.port = _free_port()
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def torchrun(self, node: str, nproc: int, rdzv: list[str]) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            # restarts must not reuse the rendezvous store's keys (pytorch#135712): each round
            # gets a fresh store from its rank 0, so no rank reads a dead peer's address
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            _NODE_ENV: node,
            _CONFIG_ENV: json.dumps({**self.config, "run": str(self.run)}),
        }
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               *rdzv, "-m", _WORKER_MODULE, "--worker"]  # fmt: skip
        proc = supervisor.start(cmd, env, self.run / f"agent-{node}.log")
        self.agents[node] = proc
        return proc

    def node(self, name: str, *, hosts_store: bool = False) -> subprocess.Popen[bytes]:
        """An elastic agent of 2 processes joining the job's c10d rendezvous."""
        host = "true" if hosts_store else "false"  # the node that hosts the store must live
        conf = ",".join(c for c in (f"is_host={host}", self.rdzv_conf) if c)
        return self.torchrun(
            name,
            2,
            ["--nnodes=1:2", "--max-restarts=3", "--rdzv-backend=c10d", "--rdzv-id=elastic",
             f"--rdzv-endpoint=127.0.0.1:{self.port}", f"--rdzv-conf={conf}"],
        )  # fmt: skip

    def wait_held(self, step: int, world: int, alive: list[str]) -> float:
        """Wait until ranks 0..world-1 of a ``world``-rank start hold after ``step``."""
        marks = [self.run / "held" / f"{step}-{world}-{r}" for r in range(world)]
        deadline = time.monotonic() + self.timeout
        while not all(m.exists() for m in marks):
            for name in alive:
                if self.agents[name].poll() is not None:
                    raise RuntimeError(self._failed(f"agent {name} exited", name))
            if time.monotonic() > deadline:
                raise TimeoutError(self._failed(f"no {world}-rank start reached {step}", *alive))
            time.sleep(0.05)
        return time.time()

    def kill_node(self, name: str) -> None:
        """A node lost: SIGKILL its agent and every worker under it (:func:`supervisor.kill`,
        the rule the other demo's time limit uses)."""
        supervisor.kill(self.agents[name])

    def finish(self, names: list[str]) -> None:
        deadline = time.monotonic() + self.timeout
        for name in names:
            try:
                code = self.agents[name].wait(max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                raise TimeoutError(self._failed(f"agent {name} did not finish", name)) from None
            if code != 0:
                raise RuntimeError(self._failed(f"agent {name} failed (exit {code})", name))

    def _failed(self, what: str, *names: str) -> str:
        logs = ", ".join(str(self.run / f"agent-{n}.log") for n in names)
        return f"demo --elastic: {what}; see {logs}"

    def close(self) -> None:
        """End every agent still running and every worker under it, whatever state they are in
        (:func:`supervisor.kill`)."""
        for proc in self.agents.values():
            supervisor.kill(proc)


def run_story(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The uninterrupted 4-rank run, then the elastic one (node lost, node back); returns
    both runs' starts (:func:`read_starts`) and the times of the membership changes."""
    script = Path(args.script)
    if not script.is_file():
        raise FileNotFoundError(
            f"demo --elastic: the training script must exist; {script} does not; pass "
            f"--script PATH of one, or leave --script out for the one seekdata ships"
        )
    argv = [f"--{name.replace('_', '-')}={getattr(args, name)}"
            for name in ("global_batch", "steps", "ckpt_every", "n", "seed")]  # fmt: skip
    runs = {}
    for name in ("uninterrupted", "elastic"):
        run = out / name
        run.mkdir(parents=True)
        config = {"script": str(script), "argv": [*argv, "--out", str(run)],
                  "timeout": args.timeout}  # fmt: skip
        runs[name] = (run, Cluster(run, config, args.timeout, args.rdzv_conf))
    run, cluster = runs["uninterrupted"]
    try:
        cluster.torchrun("ref", 4, ["--standalone", "--nnodes=1"])
        cluster.finish(["ref"])
    finally:
        cluster.close()

    run, cluster = runs["elastic"]
    events: dict[str, float] = {}
    try:
        _set_hold(run, args.kill_at)
        cluster.node("A", hosts_store=True)
        cluster.node("B")
        events["held_4"] = cluster.wait_held(args.kill_at, 4, ["A", "B"])
        events["lost"] = time.time()
        cluster.kill_node("B")  # a node lost: the agent and its workers, no warning
        _set_hold(run, args.back_at)  # the survivors go on, fail at the next collective
        events["held_2"] = cluster.wait_held(args.back_at, 2, ["A"])
        events["back"] = time.time()  # the hold stays: the 4-rank start must begin, not end
        cluster.node("C")  # a node back
        events["held_4_again"] = cluster.wait_held(args.back_at, 4, ["A", "C"])
        _set_hold(run, None)
        cluster.finish(["A", "C"])
    finally:
        cluster.close()
    return {
        "uninterrupted": read_starts(out / "uninterrupted"),
        "elastic": read_starts(run),
        "events": events,
        "procs": _procs(run),
    }


def _procs(run: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem): json.loads(p.read_text()) for p in (run / "procs").glob("*.json")}


def read_starts(run: Path) -> list[dict[str, Any]]:
    """The (re)starts of a run in time order: world, resumed_from, the times of its first
    lines and, per rank, its step records (``elastic_train.py``'s logs)."""
    starts: dict[str, dict[str, Any]] = {}
    for path in sorted((run / "log").glob("*-rank*.jsonl")):
        start_id, rank = path.stem.rsplit("-rank", 1)
        head, *records = (json.loads(line) for line in path.read_text().splitlines())
        start = starts.setdefault(start_id, {"id": start_id, "ranks": {}, "heads": {}})
        start.update(world=head["world"], resumed_from=head["resumed_from"], worlds=head["worlds"])
        start["heads"][int(rank)] = head
        start["ranks"][int(rank)] = records
    return [starts[k] for k in sorted(starts, key=int)]


def steps_of(start: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per step that every rank of ``start`` logged: the samples of each rank and the loss."""
    per_rank = start["ranks"]
    done = set.intersection(*(set(r["step"] for r in recs) for recs in per_rank.values()))
    out = {}
    for step in sorted(done):
        recs = {rank: next(r for r in recs if r["step"] == step) for rank, recs in per_rank.items()}
        out[step] = {
            "world": start["world"],
            "samples": [recs[r]["samples"] for r in sorted(recs)],
            "loss": recs[0]["loss"],
            "exact": start["worlds"] == [start["world"]],  # no other world size in its past
        }
    return out


def compare(story: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per step of each elastic start, against the uninterrupted run's step."""
    (reference,) = story["uninterrupted"]
    ref = steps_of(reference)
    rows = []
    for i, start in enumerate(story["elastic"]):
        for step, got in steps_of(start).items():
            want = ref[step]
            same_set = Counter(i for part in got["samples"] for i in part) == Counter(
                i for part in want["samples"] for i in part
            )
            rel = abs(got["loss"] - want["loss"]) / max(abs(want["loss"]), 1e-30)
            close = got["loss"] == want["loss"] if got["exact"] else rel <= TOLERANCE
            rows.append({
                "start": i, "step": step, "world": got["world"], "exact": got["exact"],
                "samples_equal": same_set, "in_order": got["samples"] == want["samples"],
                "loss": got["loss"], "loss_ref": want["loss"], "rel": rel,
                "ok": same_set and close,
            })  # fmt: skip
    return rows


#: phases of a membership change, from the event to the first step on the new world
PHASES = ("torchrun", "process start", "model", "resume (ours)", "first step")


def timeline(story: dict[str, Any]) -> list[dict[str, Any]]:
    """Seconds from each membership change (the node lost, the node back) to the first step
    on the new world, split at the slowest rank's marks of the first start after it:
    ``torchrun`` until its first worker process exists (failure detection, the dead node's
    heartbeat expiry, the rendezvous' last call, the spawn); ``process start`` until every
    rank's process group is up (python, imports, ``init_process_group``); ``model`` until the
    model, optimizer and DDP exist; ``resume (ours)`` until every rank holds its first batch
    (the loader built, the newest checkpoint verified and loaded, ``load_state_dict``, the
    first batch); ``first step`` until every rank finished it."""
    procs, rows = story["procs"], []
    for event, world in (("lost", 2), ("back", 4)):
        t0 = story["events"][event]
        start = next(
            s for s in story["elastic"]
            if s["world"] == world and min(h["t_init"] for h in s["heads"].values()) > t0
        )  # fmt: skip
        heads, firsts = start["heads"].values(), [recs[0] for recs in start["ranks"].values()]
        created = [procs[h["pid"]]["created"] for h in heads]
        if None in created:
            return []
        marks = [
            t0,
            min(created),
            max(h["t_init"] for h in heads),
            max(h["t_ready"] for h in heads),
            max(r["t_batch"] for r in firsts),
            max(r["t"] for r in firsts),
        ]
        row: dict[str, Any] = {"change": f"node {event}", "world": world}
        row.update({p: b - a for p, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True)})
        row["total"] = marks[-1] - t0
        row["resumed_from"] = start["resumed_from"]
        rows.append(row)
    return rows


# --- the demo: print, draw ---------------------------------------------------------------------


def report(story: dict[str, Any], args: argparse.Namespace, out: Path) -> bool:
    rows = compare(story)
    starts = story["elastic"]
    print(f"\n{'start':>5} {'ranks':>5} {'step':>4} | samples = uninterrupted | {'loss':>12} | "
          f"{'uninterrupted':>13} | rel. diff")  # fmt: skip
    for row in rows:
        note = ""
        if row["step"] == starts[row["start"]]["resumed_from"] + 1:
            note = f"  <- resumed from checkpoint {starts[row['start']]['resumed_from']}"
        diff = "bit-identical" if row["loss"] == row["loss_ref"] else f"{row['rel']:.1e}"
        print(f"{row['start']:>5} {row['world']:>5} {row['step']:>4} | "
              f"{'yes' if row['samples_equal'] else 'NO':>22} | {row['loss']:>12.8f} | "
              f"{row['loss_ref']:>13.8f} | {diff}{note}")  # fmt: skip
    ok = all(r["ok"] for r in rows)
    print()
    for t in timeline(story):
        parts = ", ".join(f"{p} {t[p]:.1f} s" for p in PHASES)
        print(f"{t['change']} -> first step on {t['world']} ranks: {t['total']:.1f} s ({parts})")
    worlds = " -> ".join(f"{s['world']} ranks" for s in starts)
    summary = {"ok": ok, "starts": [{k: s[k] for k in ("world", "resumed_from", "worlds")}
                                    for s in starts], "rows": rows}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    written = [out / "summary.json"]
    if _plot(rows, story, args, out / "elastic.png"):
        written.insert(0, out / "elastic.png")
    print(
        f"\nstarts: {worlds}; every step's samples equal the uninterrupted run's, losses "
        f"bit-identical before the node was lost and within {TOLERANCE:g} after: "
        f"{'YES' if ok else 'NO'}\nwrote {' and '.join(map(str, written))}"
    )
    return ok


def _plot(rows: list[dict[str, Any]], story: dict[str, Any], args: Any, path: Path) -> bool:
    plt = figures.pyplot()
    if plt is None:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True, height_ratios=[3, 2])
    ref = steps_of(story["uninterrupted"][0])
    top.plot(list(ref), [r["loss"] for r in ref.values()], lw=4, alpha=0.3, color="black",
             label="uninterrupted, 4 ranks")  # fmt: skip
    for i in sorted({r["start"] for r in rows}):
        mine = [r for r in rows if r["start"] == i]
        label = f"start {i}: {mine[0]['world']} ranks"
        top.plot([r["step"] for r in mine], [r["loss"] for r in mine], "o-", ms=3, label=label)
        bottom.semilogy([r["step"] for r in mine], [max(r["rel"], 1e-17) for r in mine], "o", ms=4)
    for ax in (top, bottom):
        ax.axvline(args.kill_at, color="red", lw=0.8)
        ax.axvline(args.back_at, color="green", lw=0.8)
    bottom.axhline(TOLERANCE, color="gray", ls="--", lw=0.8)
    top.set_ylabel("global mean loss")
    top.set_title("torchrun: node lost (red), node back (green); the same samples every step")
    top.legend(fontsize=7)
    bottom.set_ylabel("relative loss difference\n(1e-17: bit-identical)")
    bottom.set_xlabel("global step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m seekdata.demo --elastic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=16, help="global steps in all")
    p.add_argument("--kill-at", type=int, default=8, help="lose a node after this step")
    p.add_argument("--back-at", type=int, default=11, help="a node back after this step")
    p.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks")
    p.add_argument("--ckpt-every", type=int, default=3, help="checkpoint every k steps")
    p.add_argument("--n", type=int, default=96, help="dataset size")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--timeout", type=float, default=300, help="seconds each phase may take")
    p.add_argument("--script", default=str(default_script()), help="the training script")
    p.add_argument("--rdzv-conf", default=RDZV_CONF, help="torchrun's --rdzv-conf ('': torch's)")
    p.add_argument("--out", default="seekdata-demo-elastic", help="folder for runs and plot")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not 0 < args.kill_at < args.back_at < args.steps:
        p.error(f"need 0 < --kill-at < --back-at < --steps; got {args.kill_at}, {args.back_at}, "
                f"{args.steps}")  # fmt: skip
    if args.global_batch < 1 or args.global_batch % 4:
        p.error(f"--global-batch must be a positive multiple of 4 (it runs on 4 and 2 ranks); "
                f"got {args.global_batch}")  # fmt: skip
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        _worker()
        seekdata.exit_ddp()  # torch's gloo threads can abort a finished rank at shutdown
    out = Path(args.out)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    print(f"uninterrupted: 4 ranks, {args.steps} steps of a global batch {args.global_batch}; "
          f"then two torchrun agents of 2 ranks: SIGKILL one after step {args.kill_at}, start "
          f"one after step {args.back_at}", flush=True)  # fmt: skip
    story = run_story(out, args)
    return 0 if report(story, args, out) else 1


if __name__ == "__main__":
    sys.exit(main())
