"""A real elastic run: two torchrun agents on 127.0.0.1 share one c10d rendezvous
(``--nnodes=1:2``, 2 processes each, gloo) and run the packaged elastic_train.py. One agent and
its workers are SIGKILLed after step 8 (a node lost): the survivor restarts on 2 ranks from
checkpoint 6. A new agent starts after step 11 (a node back): the job restarts on 4 ranks from
checkpoint 9. Every step of every start is checked against an uninterrupted 4-rank run.

Kill and return are placed by files (the ranks hold after a step until the story moves on);
every wait of the story is bounded, and every agent and worker is ended, even on failure."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from seekdata.tools.demo import elastic

N, STEPS, EVERY, KILL_AT, BACK_AT = 96, 16, 3, 8, 11
EPOCH = 6  # global steps of 16 samples per epoch of 96


def _flat(step: dict) -> Counter:
    return Counter(i for part in step["samples"] for i in part)


@pytest.mark.slow
def test_torchrun_loses_a_node_and_gets_it_back_and_every_step_sees_the_same_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = elastic.parse(
        ["--out", str(tmp_path), "--steps", str(STEPS), "--kill-at", str(KILL_AT),
         "--back-at", str(BACK_AT), "--ckpt-every", str(EVERY), "--n", str(N),
         "--global-batch", "16", "--timeout", "240"]
    )  # fmt: skip
    story = elastic.run_story(tmp_path, args)
    for pid_file in (tmp_path / "elastic" / "pids").iterdir():  # nothing left running
        pid = int(pid_file.read_text())
        assert not Path(f"/proc/{pid}").exists() or elastic._WORKER_MODULE not in _cmdline(pid)

    (reference,) = story["uninterrupted"]
    ref = elastic.steps_of(reference)
    assert sorted(ref) == list(range(1, STEPS + 1)) and reference["world"] == 4
    for epoch_start in range(0, STEPS - EPOCH + 1, EPOCH):  # each epoch: every sample once
        seen = sum(
            (_flat(ref[s]) for s in range(epoch_start + 1, epoch_start + EPOCH + 1)), Counter()
        )
        assert seen == Counter(range(N))

    starts = story["elastic"]
    lost, back = story["events"]["lost"], story["events"]["back"]
    began = [min(head["t_init"] for head in s["heads"].values()) for s in starts]
    after_loss = [s for s, t in zip(starts, began, strict=True) if lost < t < back]
    after_back = [s for s, t in zip(starts, began, strict=True) if t > back]
    before = [s for s, t in zip(starts, began, strict=True) if t < lost]
    # a node lost: the survivor runs on 2 ranks from the checkpoint before the kill (6), so
    # steps 7 and 8 are run again; a node back: 4 ranks from the 2-rank run's checkpoint 9
    assert before[-1]["world"] == 4 and after_loss[0]["world"] == 2
    assert after_loss[0]["resumed_from"] == KILL_AT // EVERY * EVERY
    assert after_back[-1]["world"] == 4 and after_back[-1]["worlds"] == [2, 4]
    assert after_back[-1]["resumed_from"] == BACK_AT // EVERY * EVERY

    done = 0  # the highest step any earlier start ran
    last: dict[int, dict] = {}
    for start in starts:
        steps = elastic.steps_of(start)
        resumed = start["resumed_from"]
        # a checkpoint of an earlier start, never beyond what ran: nothing skipped
        assert resumed % EVERY == 0 and resumed <= done, (start["id"], resumed, done)
        # every step from the checkpoint on, in order: nothing before it seen again
        assert list(steps) == list(range(resumed + 1, resumed + 1 + len(steps)))
        for step, got in steps.items():
            want = ref[step]
            assert _flat(got) == _flat(want), (start["world"], step)  # the same global batch
            if start["world"] == 4:
                assert got["samples"] == want["samples"], step  # each rank's, in order
            if start["worlds"] == [4]:  # never on another world size: the same float math
                assert got["loss"] == want["loss"], step
            else:  # the all-reduce summed the same samples in another grouping
                assert got["loss"] == pytest.approx(want["loss"], rel=elastic.TOLERANCE)
            last[step] = got
        done = max(done, *steps) if steps else done
    assert sorted(last) == list(range(1, STEPS + 1))  # the run as it stands: every step once

    # the demo's report of this run (python -m seekdata.demo --elastic prints and draws it)
    assert elastic.report(story, args, tmp_path)
    printed = capsys.readouterr().out
    assert printed.splitlines()[-2].endswith(": YES")
    assert (tmp_path / "elastic.png").read_bytes()[:4] == b"\x89PNG"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
