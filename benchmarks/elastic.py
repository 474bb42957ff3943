"""torchrun loses a node and gets it back: the time from each change to the first step on the
new world, torchrun's part and ours.

    python benchmarks/elastic.py [--rounds 3] [--out FILE] [--quick]

Each round runs the story of ``python -m seekdata.demo --elastic`` (and of
tests/tools/test_elastic_torchrun.py): two torchrun agents of 2 processes on 127.0.0.1, one c10d
rendezvous, the packaged ``elastic_train.py`` with a global batch of 16 and a checkpoint every 3
steps; one agent and its workers SIGKILLed after step 8, a new agent started after step 11;
every step checked against an uninterrupted 4-rank run. A change's time runs from the SIGKILL
(or the new agent's start) to the slowest rank's end of the first step on the new world, split
into phases (``seekdata.tools.demo.elastic.timeline``): torchrun (failure detection, the dead
node's heartbeat expiry, the rendezvous' last call, the spawn; for a node back, the new agent's
own start too), process start (python, imports, ``init_process_group``), model (model,
optimizer, DDP), resume (ours: loader, checkpoint verified and loaded, ``load_state_dict``, the
first batch), first step. Prints the medians, writes JSON and a stacked bar plot beside it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import _harness as H  # benchmarks/ is on sys.path when a script here runs
from seekdata.tools.demo import elastic as _elastic


def main() -> None:
    parser = H.script_parser(__doc__.splitlines()[0], H.RESULTS / "elastic.json")
    parser.add_argument("--rounds", type=int, default=3, help="stories run (median reported)")
    parser.add_argument(
        "--rdzv-conf", default=_elastic.RDZV_CONF, help="torchrun's ('': torch's own)"
    )
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    story_args = _elastic.parse(["--timeout", "300", "--rdzv-conf", args.rdzv_conf])
    runs: list[list[dict]] = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            story = _elastic.run_story(Path(tmp), story_args)
            bad = [row for row in _elastic.compare(story) if not row["ok"]]
            if bad:
                raise SystemExit(f"round {r}: steps differ from the uninterrupted run: {bad}")
            runs.append(_elastic.timeline(story))
            print(f"round {r}: " + ", ".join(f"{t['change']} {t['total']:.1f} s" for t in runs[-1]))
    rows = []
    for i, change in enumerate(runs[0]):
        row = {"change": change["change"], "world": change["world"]}
        for key in (*_elastic.PHASES, "total"):
            row[key] = H.median([run[i][key] for run in runs])
        row["resumed_from"] = change["resumed_from"]
        rows.append(row)
    print(H.table(rows, ["change", "world", *_elastic.PHASES, "total", "resumed_from"]))
    H.write(args.out, "elastic", rows, rounds=rounds, runs=runs, story=vars(story_args))
    _plot(args.out.with_suffix(".png"), rows, rounds)


def _plot(out: Path, rows: list[dict], rounds: int) -> None:
    try:
        plt = H.pyplot()
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(9, 2.8))
    labels = [f"{r['change']} -> first step on {r['world']} ranks" for r in rows]
    left = [0.0] * len(rows)
    for phase in _elastic.PHASES:
        widths = [r[phase] for r in rows]
        ax.barh(labels, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds (median of {rounds})")
    ax.set_title("membership changes under torchrun: where the time goes")
    ax.legend(
        fontsize=7, ncol=len(_elastic.PHASES), loc="upper center", bbox_to_anchor=(0.5, -0.35)
    )
    H.save(fig, out)


if __name__ == "__main__":
    main()
