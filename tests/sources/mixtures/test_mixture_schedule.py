"""seekdata.Mixture with a schedule of weights: agrees with a replay of the stream, keeps each
source's epochs whole across changes, stays within each segment's bound, resumes exactly."""

from __future__ import annotations

import json
import pathlib
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seekdata
from seekdata.order import Feistel
from seekdata.testing import assert_exact_resume
from tests.helpers.mixtures import Source, bounded
from tests.helpers.paths import GOLDEN, SCRIPTS
from tests.helpers.ranks import run_ranks
from tests.helpers.scripts import MIXTURE_SCHEDULE_RUN, script_once


def mix3(schedule: Any = None, **kw: Any) -> seekdata.Mixture:
    sources = {"web": Source(0, 5), "code": Source(1, 7), "maths": Source(2, 4)}
    schedule = schedule or [
        (0, {"web": 3, "code": 1}),  # maths joins at 9, web leaves at 20 and returns at 31
        (9, {"web": 1, "code": 1, "maths": 1}),
        (20, {"code": 1, "maths": 2}),
        (31, [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]),
    ]
    return seekdata.Mixture(sources, schedule=schedule, **kw)


def static(sizes: list[int], a: list[Any]) -> tuple[seekdata.Mixture, list[int]]:
    """The plain mixture of a segment's present sources (the reference for its routing), and
    the source of each of its leaves."""
    present = [k for k, x in enumerate(a) if x]
    return seekdata.Mixture([range(sizes[k]) for k in present], [a[k] for k in present]), present


def replay(
    mix: seekdata.Mixture, sizes: list[int], stop: int
) -> list[tuple[int, int, int, list[int]]]:
    """Walk stream positions [0, stop) from the start: the segment's plain mixture picks the
    source at the segment's own position, each source takes its next sample in its own
    Feistel order. (source, source epoch, index, counts before) per position."""
    starts = [start for start, _ in mix.schedule]
    counts, out = [0] * len(sizes), []
    refs = [static(sizes, list(weights)) for _, weights in mix.schedule]
    j = 0
    for p in range(stop):
        while j + 1 < len(starts) and p >= starts[j + 1]:
            j += 1
        ref, present = refs[j]
        k = present[ref.locate(p - starts[j], 0)[0]]
        q = counts[k]
        e, n = q // sizes[k], sizes[k]
        index = int(Feistel(n, mix.source_seeds[k]).indices(e, np.array([q % n]))[0])
        out.append((k, e, index, list(counts)))
        counts[k] += 1
    return out


@st.composite
def schedules(draw: Any, top: int = 400) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """(source lengths, schedule): K <= 20, starts up to ``top``, some weights 0, every
    source present somewhere."""
    k = draw(st.integers(1, 20))
    sizes = draw(st.lists(st.integers(1, 9), min_size=k, max_size=k))
    starts = sorted(set(draw(st.lists(st.integers(1, top), max_size=5))))
    schedule = []
    for start in [0, *starts]:
        a = draw(st.lists(st.integers(0, 9), min_size=k, max_size=k))
        if not any(a):
            a[draw(st.integers(0, k - 1))] = 1
        schedule.append((start, a))
    for s in range(k):  # a source with weight 0 everywhere is refused: give it one segment
        if all(a[s] == 0 for _, a in schedule):
            schedule[draw(st.integers(0, len(schedule) - 1))][1][s] = 1
    return sizes, schedule


@settings(max_examples=60, deadline=None)
@given(case=schedules())
def test_locate_and_counts_agree_with_a_replay_of_the_stream(case: Any) -> None:
    sizes, schedule = case
    mix = seekdata.Mixture([range(n) for n in sizes], schedule=schedule, length=37)
    stop, within = schedule[-1][0] + 60, bounded(mix)
    for p, (k, e, index, counts) in enumerate(replay(mix, sizes, stop)):
        assert mix.locate(p % 37, p // 37) == (k, e, index), p
        if p % 5 == 0 or any(p == s for s, _ in schedule):
            assert mix.counts(p % 37, p // 37) == counts, p
        within(counts, p)


@settings(max_examples=40, deadline=None)
@given(case=schedules(top=10**12), data=st.data())
def test_far_positions_agree_with_a_replay_by_segments(case: Any, data: Any) -> None:
    """Up to 1e12 the walk is replaced by each segment's plain mixture: what each source holds
    at a start is the sum of the previous segments' counts at their lengths. Around every start
    and at a far point, positions walked one by one agree with locate and counts."""
    sizes, schedule = case
    mix = seekdata.Mixture([range(n) for n in sizes], schedule=schedule, length=1)
    spec, within = mix.schedule, bounded(mix)
    held = [0] * len(sizes)
    far = data.draw(st.integers(0, 10**12))
    points = sorted({*(s for s, _ in spec), far})
    for j, (start, a) in enumerate(spec):
        assert mix.counts(start) == held
        assert sum(held) == start
        stop = spec[j + 1][0] if j + 1 < len(spec) else 10**13
        ref, present = static(sizes, list(a))
        for p0 in (p for p in points if start <= p < stop):
            counts = list(held)
            for leaf, c in enumerate(ref.counts(max(start, p0 - 30) - start)):
                counts[present[leaf]] += c
            for p in range(max(start, p0 - 30), min(stop, p0 + 30)):
                within(counts, p)
                k = present[ref.locate(p - start)[0]]
                q = counts[k]
                want = Feistel(sizes[k], mix.source_seeds[k]).indices(
                    q // sizes[k], np.array([q % sizes[k]])
                )[0]
                assert mix.locate(p) == (k, q // sizes[k], want), p
                counts[k] += 1
            assert mix.counts(p + 1) == counts
        if j + 1 < len(spec):
            for leaf, c in enumerate(ref.counts(stop - start)):
                held[present[leaf]] += c


def test_golden_schedule() -> None:
    """A scheduled stream is pinned like every other: a change to it breaks users' runs."""
    from tests.golden.regenerate import mixture_schedule_golden

    golden = json.loads((GOLDEN / "mixture_schedule.json").read_text())
    assert mixture_schedule_golden() == golden


def test_each_source_walks_whole_epochs_across_changes() -> None:
    """Across joining, leaving and returning: each source's samples within a source epoch are
    distinct, every finished epoch holds all of them, and a source absent from a segment gets
    nothing there."""
    mix = mix3(length=10)
    per: dict[tuple[int, int], list[int]] = {}
    got = []
    for p in range(400):
        k, e, i = mix.locate(p % 10, p // 10)
        per.setdefault((k, e), []).append(i)
        got.append(k)
    assert set(got[:9]) == {0, 1} and 2 in got[9:20]  # maths joins at 9
    assert 0 not in got[20:31] and 0 in got[31:]  # web leaves at 20 and returns at 31
    for (k, e), indices in per.items():
        n = len(mix.datasets[k])
        assert len(set(indices)) == len(indices), (k, e)
        if (k, e + 1) in per:
            assert sorted(indices) == list(range(n)), (k, e)
    # web continues from its count: its sample at 31 is its 18th, not a restart of anything
    assert mix.counts(31, 0)[0] == mix.counts(20, 0)[0] == sum(k == 0 for k in got[:20])


def test_plain_weights_are_a_schedule_of_one_segment() -> None:
    """Without a schedule the stream and the loader's signature are those of before schedules
    (pinned); a schedule of one segment is the same mixture; a dict of sources only names them;
    and a schedule follows its first weights exactly until its first change."""
    args = ([range(5), range(7), range(40)], [Fraction(1, 2), Fraction(1, 3), 0.2])
    plain = seekdata.Mixture(*args, length=30, seed=7)
    assert plain.stream_signature == "Mixture(K=3, length=30, seed=7, 378021adad4ab6da)"
    windowed = seekdata.Mixture([range(5), range(7)], [2, 1], length=24, seed=7, window=6)
    assert windowed.stream_signature == "Mixture(K=2, length=24, seed=7, 6f27f0d14b1fa278)"
    one = seekdata.Mixture(args[0], schedule=[(0, args[1])], length=30, seed=7)
    named = seekdata.Mixture(
        dict(zip("abc", args[0], strict=True)), {"c": 0.2, "a": Fraction(1, 2), 1: Fraction(1, 3)},
        length=30, seed=7,
    )  # fmt: skip
    later = seekdata.Mixture(args[0], schedule=[(0, args[1]), (40, [1, 1, 1])], length=30, seed=7)
    for mix in (one, named):
        assert mix.stream_signature == plain.stream_signature
    assert later.stream_signature != plain.stream_signature
    assert named.names == ("a", "b", "c") and plain.names is None
    assert [plain.locate(p, 1) for p in range(30)] == [one.locate(p, 1) for p in range(30)]
    assert [plain.locate(p) for p in range(40)] == [later.locate(p) for p in range(40)]
    assert [plain.locate(p) for p in range(40, 50)] != [later.locate(p) for p in range(40, 50)]
    assert later.weights == plain.weights and later.schedule[1] == (40, (Fraction(1, 3),) * 3)


@settings(max_examples=25, deadline=None)
@given(case=schedules(top=40), window=st.integers(2, 12))
def test_a_window_shuffles_within_segments(case: Any, window: int) -> None:
    """Starts are multiples of the window, so a window never straddles a change: each window
    holds the same sources as without the shuffle, counts agree at window ends, and inside
    the looser bound holds."""
    sizes, schedule = case
    schedule = [(start * window, a) for start, a in schedule]
    plain = seekdata.Mixture([range(n) for n in sizes], schedule=schedule, length=1)
    mix = seekdata.Mixture([range(n) for n in sizes], schedule=schedule, length=1, window=window)
    stop, within = schedule[-1][0] + 3 * window, bounded(mix)
    counts = [0] * len(sizes)
    walked: list[int] = []
    for p in range(stop):
        if p % window == 0:
            assert counts == plain.counts(p) == mix.counts(p)
            assert sorted(walked) == sorted(plain.locate(t)[0] for t in range(p - len(walked), p))
            walked = []
        within(counts, p)
        k = mix.locate(p)[0]
        walked.append(k)
        counts[k] += 1
    assert counts == mix.counts(stop)


@pytest.mark.parametrize("workers, resume_workers, window", [(2, 0, 0), (0, 2, 0), (2, 0, 3)])
def test_exact_resume_at_every_step_across_changes(
    workers: int, resume_workers: int, window: int
) -> None:
    """Interrupted at every step of two epochs, before, at and after each change."""

    def make(num_workers: int = workers) -> seekdata.StatefulDataLoader:
        schedule = [(0, [1, 1, 0]), (9, [1, 2, 1]), (21, {"maths": 1}), (30, [3, 1, 1])]
        return seekdata.StatefulDataLoader(
            mix3(schedule, length=19, window=window), batch_size=4, num_workers=num_workers
        )

    assert assert_exact_resume(make, epochs=2, resume_kwargs={"num_workers": resume_workers}) == 11


def test_a_state_from_another_schedule_is_refused() -> None:
    loader = seekdata.StatefulDataLoader(mix3(length=10), batch_size=4)
    next(iter(loader))
    state = json.loads(json.dumps(loader.state_dict()))
    seekdata.StatefulDataLoader(mix3(length=10), batch_size=4).load_state_dict(state)
    moved = [(0, [1, 1, 1]), (10, [1, 2, 1])]
    for other in (
        mix3(moved, length=10),
        mix3([(0, [1, 1, 1]), (11, [1, 2, 1])], length=10),  # the same weights, another start
        seekdata.Mixture(mix3().datasets, [1, 1, 1], length=10),
    ):
        with pytest.raises(seekdata.StateMismatchError, match="dataset is 'Mixture"):
            seekdata.StatefulDataLoader(other, batch_size=4).load_state_dict(state)


@pytest.mark.parametrize(
    "schedule, kwargs, error, match",
    [
        ([(0, [1, 1, 1]), (5, [1, 1, 1]), (5, [2, 1, 1])], {}, ValueError, "increase strictly"),
        ([(0, [1, 1, 1]), (9, [1, 1, 1]), (5, [2, 1, 1])], {}, ValueError, "increase strictly"),
        ([(3, [1, 1, 1])], {}, ValueError, "must start at position 0"),
        ([(0, {"web": 1, "text": 1})], {}, ValueError, "'text', which is not one of"),
        ([(0, {3: 1})], {}, ValueError, r"source index must be in \[0, 3\)"),
        ([(0, {True: 1})], {}, TypeError, "a name .str. or an index .int."),
        ([(0, {"web": 1, 0: 2})], {}, ValueError, "source 'web' two weights"),
        ([(0, [1, -1, 1])], {}, ValueError, r">= 0 in a schedule; schedule\[0\]\[1\] is -1"),
        ([(0, [1, 1, 1]), (4, {})], {}, ValueError, r"schedule\[1\] gives every source weight 0"),
        ([(0, [1, 1, 0]), (4, [1, 1, 0])], {}, ValueError, "source 'maths' has weight 0 in every"),
        ([(0, [1, 1])], {}, ValueError, "one weight per dataset"),
        ([(0, [1, 1, 1]), (5, [1, 1, 1])], {"window": 4}, ValueError, "use 4 or 8"),
        ([(0, [1, 1, 1]), (-5, [1, 1, 1])], {}, ValueError, "start must be a non-negative int"),
        ([(0, [1, 1, 1]), (2.0, [1, 1, 1])], {}, TypeError, "start must be a non-negative int"),
        ([(0, [1, 1, 1], 3)], {}, TypeError, r"schedule\[0\] must be a pair"),
        ([], {}, TypeError, "schedule must be a non-empty list"),
        ({0: [1, 1, 1]}, {}, TypeError, "schedule must be a non-empty list"),
        ([(0, "111")], {}, TypeError, "list of numbers or a dict by source"),
        ([(0, [1, 1, 1])], {"weights": [1, 1, 1]}, TypeError, "exactly one of weights= and"),
    ],
)
def test_bad_schedules(schedule: Any, kwargs: dict[str, Any], error: type, match: str) -> None:
    sources = {"web": range(3), "code": range(3), "maths": range(3)}
    with pytest.raises(error, match=match):
        seekdata.Mixture(sources, schedule=schedule, **kwargs)


def test_names_need_a_dict_of_sources() -> None:
    with pytest.raises(ValueError, match="the sources have no names; pass the datasets as a dict"):
        seekdata.Mixture([range(3)], schedule=[(0, {"web": 1})])
    with pytest.raises(TypeError, match="keyed by source name"):
        seekdata.Mixture({0: range(3)}, [1])
    with pytest.raises(TypeError, match="got neither"):
        seekdata.Mixture([range(3)])
    with pytest.raises(ValueError, match=r"every source a weight; \['b'\] missing"):
        seekdata.Mixture({"a": range(3), "b": range(2)}, {"a": 1})


@pytest.mark.slow
def test_a_ddp_run_across_changes_resumes_on_another_world_size(tmp_path: pathlib.Path) -> None:
    """Real gloo ranks: saved on 2 ranks x 3, resumed on 3 ranks x 2 (the same global batch of
    6); every later global step, across a change inside a step and one in the second epoch,
    holds the same samples with the same randomness."""
    from tests.scripts._mixsched_worker import SCHEDULE, mixture

    def run(world: int, mode: str, batch: int, steps: int, name: str) -> list:
        out = tmp_path / f"{name}.json"
        args = [mode, str(batch), str(steps), str(out), str(tmp_path / "ckpt.pt")]
        run_ranks(SCRIPTS / "_mixsched_worker.py", world, args)
        return json.loads(out.read_text())

    full = run(2, "full", 3, 10, "full")
    head = run(2, "save", 3, 2, "head")
    rest = run(3, "resume", 2, 10, "rest")
    assert head == full[:2]
    assert [r["step"] for r in rest] == list(range(2, 10))
    assert rest == full[2:]
    mix = mixture()
    want = [mix.locate(p % 36, p // 36)[::2] for p in range(60)]
    assert [sorted((s, i) for s, i, _, _ in r["samples"]) for r in full] == [
        sorted(want[6 * step : 6 * step + 6]) for step in range(10)
    ]
    assert SCHEDULE[-1][0] < 60  # the run crosses every change
    assert Counter(s for s, _ in want[27:45])[0] == 0


def test_the_schedule_benchmark_runs_and_its_state_stays_small(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """benchmarks/mixture.py --only-schedule writes the rows docs/mixtures.md cites (no timing
    is asserted): 10 segments, K = 16 and 1,000, and the loader's state does not grow with them.
    The run is shared with test_mixture_changes.py's test of its changes table."""
    folder, _ = script_once(tmp_path_factory, *MIXTURE_SCHEDULE_RUN)
    rows = json.loads((folder / "mixture_schedule.json").read_text())["schedule"]
    assert [(r["K"], r["segments"]) for r in rows] == [(16, 10), (1000, 10)]
    assert all(r["locate (us)"] > 0 and r["state (bytes of JSON)"] < 4096 for r in rows)
