"""seekdata.Mixture changed at resume (other weights, an added, a removed and a grown source):
each source's epochs stay whole across the change, every checkpoint before or after it
resumes into the same stream, the state records the change in little space, and a change
that is not declared is refused naming it."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seekdata
from seekdata.order import Feistel, make_order
from seekdata.sources.mixtures.growth import SourceLengths
from seekdata.testing import assert_exact_resume
from tests.helpers.forker import Forker
from tests.helpers.mixtures import Source, bounded
from tests.helpers.paths import SCRIPTS
from tests.helpers.ranks import run_ranks

NEW = {"code": 1, "maths": 2, "books": 1}  # from the change on: web removed, books added


def before_sources() -> dict[str, Source]:
    return {"web": Source(0, 5), "code": Source(1, 7), "maths": Source(2, 4)}


def before(length: int = 10) -> seekdata.Mixture:
    """A scheduled mixture (maths joins at 8) that the tests change at resume."""
    sources = before_sources()
    schedule = [(0, {"web": 3, "code": 1}), (8, {"web": 1, "code": 1, "maths": 1})]
    return seekdata.Mixture(sources, schedule=schedule, length=length, seed=3)


def after(at: Any, mix: seekdata.Mixture | None = None) -> seekdata.Mixture:
    """``before()`` changed at ``at``: web removed, books added, code grown from 7 to 10."""
    return (mix or before()).changed(
        at, NEW, add={"books": Source(3, 3)}, remove=["web"], grown={"code": Source(1, 10)}
    )


def loader(mix: seekdata.Mixture, **kw: Any) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(mix, batch_size=2, **kw)


def walk(mix: seekdata.Mixture, stop: int) -> dict[tuple[int, int], list[int]]:
    """Each source epoch's indices, in stream order, over positions [0, stop)."""
    per: dict[tuple[int, int], list[int]] = {}
    for p in range(stop):
        k, e, i = mix.locate(p % len(mix), p // len(mix))
        per.setdefault((k, e), []).append(i)
    return per


def test_each_source_epoch_stays_whole_across_a_change_at_every_step() -> None:
    """For a change at every step of a small run (before, at and after the scheduled change
    at 8): the stream agrees with the old mixture before it; each source continues from its
    count; within a source epoch its indices are distinct, and a finished epoch holds the
    whole source as it stood then (code grew 7 -> 10 in its current epoch); books starts at
    its beginning; web gets nothing after; each segment keeps its bound."""
    old = before()
    for at in range(2, 42, 2):
        mix = after(at)
        assert [mix.locate(p % 10, p // 10) for p in range(at)] == [
            old.locate(p % 10, p // 10) for p in range(at)
        ]
        held = old.counts(at % 10, at // 10)
        assert mix.counts(at % 10, at // 10) == [*held, 0]
        grew_in = held[1] // 7  # code's source epoch when it grew
        per = walk(mix, 300)
        for (k, e), indices in per.items():
            assert len(set(indices)) == len(indices), (at, k, e)
            if (k, e + 1) in per:  # a finished source epoch: the whole source, once
                n = 10 if k == 1 and e >= grew_in else len(mix.datasets[k])
                n = 7 if k == 1 and e < grew_in else n
                assert sorted(indices) == list(range(n)), (at, k, e)
        first = int(Feistel(3, mix.source_seeds[3]).indices(0, np.array([0]))[0])
        assert mix.locate(*_first(mix, 3, at)) == (3, 0, first)  # books: at its beginning
        assert all(mix.locate(p % 10, p // 10)[0] != 0 for p in range(at, 300))
        within, counts = bounded(mix), [0] * 4
        for p in range(300):
            within(counts, p)
            counts[mix.locate(p % 10, p // 10)[0]] += 1


def _first(mix: seekdata.Mixture, k: int, start: int) -> tuple[int, int]:
    p = next(p for p in range(start, 10**4) if mix.locate(p % 10, p // 10)[0] == k)
    return p % 10, p // 10


@pytest.mark.parametrize("workers, resume_workers", [(2, 0), (0, 2)])
def test_exact_resume_at_every_step_before_and_after_the_change(
    workers: int, resume_workers: int
) -> None:
    """The changed run, interrupted at every step of three epochs (the change at 14, inside
    the second) and resumed on another worker count, is the uninterrupted changed run."""

    def make(num_workers: int = workers) -> seekdata.StatefulDataLoader:
        return loader(after(14), num_workers=num_workers)

    kwargs = {"num_workers": resume_workers}
    assert assert_exact_resume(make, epochs=3, resume_kwargs=kwargs) == 16


def _run(dl: seekdata.StatefulDataLoader, epochs: range) -> list[Any]:
    out = []
    for epoch in epochs:
        dl.set_epoch(epoch)
        out += [(b["source"].tolist(), b["index"].tolist(), b["x"], b["y"]) for b in dl]
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x[:2] == y[:2] and torch.equal(x[2], y[2]) and torch.equal(x[3], y[3])
        for x, y in zip(a, b, strict=True)
    )


def test_every_checkpoint_earlier_or_later_resumes_into_the_changed_stream() -> None:
    """The run that made the change (the old mixture until step 7, ``changed(state)`` from
    there), the changed mixture rebuilt from the literal position, and resumes of it from
    checkpoints the *old* mixture saved before the change or the changed one saved after:
    one stream, bit for bit. The change's state records it; before it, nothing new."""
    full = _run(loader(after(14)), range(3))
    head, state = _upto(before(), 7)
    assert [r["at"] for r in state["source"]["history"]] == [8]  # the old mixture's own change
    mix = after(state)
    assert mix.schedule[-1][0] == 14 and mix.stream_signature == after(14).stream_signature
    resumed = loader(mix)
    resumed.load_state_dict(state)
    assert _same(head + _run(resumed, range(1, 3)), full)
    for step in range(15):  # earlier checkpoints (the old mixture's), and later ones
        _, saved = _upto(before() if step <= 7 else after(14), step)
        records = saved.get("source", {})
        assert [r["at"] for r in records.get("history", [])] == [8, 14][: (step >= 4) + (step > 7)]
        again = loader(after(14))
        again.load_state_dict(saved)
        assert _same(_run(again, range(step // 5, 3)), full[step:]), step


def _upto(mix: seekdata.Mixture, steps: int) -> tuple[list[Any], dict[str, Any]]:
    """The first ``steps`` batches of a loader over ``mix`` (5 per epoch), and its state."""
    dl, out = loader(mix), []
    for epoch in range(steps // 5 + 1):
        dl.set_epoch(epoch)
        it = iter(dl)
        for _ in range(min(5, steps - 5 * epoch)):
            b = next(it)
            out.append((b["source"].tolist(), b["index"].tolist(), b["x"], b["y"]))
    return out, json.loads(json.dumps(dl.state_dict()))


def test_the_state_records_the_change_only_when_there_is_one() -> None:
    plain = seekdata.Mixture({"web": range(5), "code": range(7)}, [3, 1], length=10)
    dl = loader(plain)
    next(iter(dl))
    state = dl.state_dict()
    assert set(state) & {"prefix", "history", "source"} == set()  # as before changes existed
    assert plain.prefix_signature(2) == plain.stream_signature == state["dataset"]
    mix = plain.changed(state, {"code": 1, "books": 1}, add={"books": range(3)})
    dl = loader(mix)
    dl.load_state_dict(state)
    records = dl.state_dict()["source"]  # the mixture's own records, under the key it owns
    assert records["kind"] == "Mixture"
    assert records["prefix"] == state["dataset"]  # the stream before: the plain one
    history = records["history"]  # the change at the cursor took effect
    assert history == [
        {"at": 2, "epoch": 0, "position": 2, "added": ["books"], "removed": ["web"],
         "weights": ["0", "1/2", "1/2"], "digest": history[0]["digest"]},
    ]  # fmt: skip


@pytest.mark.slow
def test_a_ddp_run_changed_at_resume_continues_on_another_world_size(
    tmp_path: pathlib.Path,
) -> None:
    """Real gloo ranks: the old mixture saved on 2 ranks x 3; ``changed(state)`` resumed on
    3 ranks x 2 (the same global batch of 6): every later global step holds the samples, with
    the same randomness, of a 2-rank run of the changed mixture from the start."""
    from tests.scripts._mixchange_worker import AT, changed

    def run(world: int, mode: str, batch: int, steps: int, name: str) -> list:
        out = tmp_path / f"{name}.json"
        args = [mode, str(batch), str(steps), str(out), str(tmp_path / "ckpt.pt")]
        run_ranks(SCRIPTS / "_mixchange_worker.py", world, args, timeout=120, forker=forker)
        return json.loads(out.read_text())

    with Forker("torch", "torch.distributed", "seekdata") as forker:  # 7 ranks, 1 torch import
        full = run(2, "full", 3, 10, "full")
        head = run(2, "save", 3, 2, "head")
        rest = run(3, "resume", 2, 10, "rest")
    assert head == full[:2]
    assert [r["step"] for r in rest] == list(range(2, 10))
    assert rest == full[2:]
    mix = changed(AT)
    want = [mix.locate(p % 36, p // 36)[::2] for p in range(60)]
    assert [sorted((s, i) for s, i, _, _ in r["samples"]) for r in full] == [
        sorted(want[6 * step : 6 * step + 6]) for step in range(10)
    ]
    assert {s for s, _ in want[AT:]} == {1, 2, 3} and 0 in {s for s, _ in want[:AT]}


def _state(mix: seekdata.Mixture, steps: int) -> dict[str, Any]:
    return _upto(mix, steps)[1]


@pytest.mark.parametrize(
    "other, match",
    [
        (before,
         r"the checkpoint changed at P=14 \(\+ books; - web; code grew 7 -> 10; weights 0 "
         r"1/4 1/2 1/4\), this mixture has no change there: build it with the same history "
         r"\(mix.changed\(14, ...\)\)"),
        (lambda: after(16), r"the checkpoint changed at P=14 .*this mixture has no change there"),
        (lambda: after(12), r"this mixture changes at P=12 \(\+ books.*before the checkpoint"),
        (lambda: before().changed(14, NEW, add={"books": Source(3, 3)}, remove=["web"]),
         r"changed at P=14 \(\+ books; - web; code grew 7 -> 10; .*this mixture changes there "
         r"\(\+ books; - web; weights"),
        (lambda: after(14, seekdata.Mixture(before_sources(), length=10, seed=3,
                                            schedule=[(0, [3, 1, 0]), (10, [1, 1, 1])])),
         r"dataset is 'Mixture\(K=4.* here; the checkpoint changed at P=8 \(\+ maths; weights "
         r"1/3 1/3 1/3 0\), this mixture has no change there"),
    ],
)  # fmt: skip
def test_an_undeclared_change_is_refused_naming_it(other: Any, match: str) -> None:
    """A re-weighted mixture, a change at another position, a missing growth, an edited past
    segment: refused, naming the first recorded change that differs."""
    state = _state(after(14), 9)
    with pytest.raises(seekdata.StateMismatchError, match=match) as raised:
        loader(other()).load_state_dict(state)
    assert "or strict=False" in str(raised.value)


def test_an_old_state_into_a_mixture_changed_before_it_is_refused() -> None:
    """The old mixture's state after 14 (changed at 10 here): the stream it consumed differs."""
    state = _state(before(), 7)
    with pytest.raises(seekdata.StateMismatchError, match=r"this mixture changes at P=10"):
        loader(after(10)).load_state_dict(state)
    with pytest.warns(UserWarning, match=r"continuing \(strict=False\)"):
        loader(after(10)).load_state_dict(state, strict=False)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"at": 0}, ValueError, "at is position 0, before anything was read"),
        ({"at": 2.0}, TypeError, "at must be a stream position .int. or a loader/sampler state"),
        ({"at": {"epoch": 0}}, ValueError, "the state's 'position' is None"),
        ({"at": {"epoch": 0, "position": 2, "n": 11}}, ValueError, "this mixture has 10"),
        ({"length": 20}, ValueError, "length= .a new mixture epoch length. is not supported"),
        ({"add": {"web": range(3)}}, ValueError, r"add names \['web'\], already sources"),
        ({"add": [range(3)]}, TypeError, "add must be a dict"),
        ({"remove": ["books"]}, ValueError, "'books', which is not one of"),
        ({"weights": {"web": 1, "code": 1}, "remove": ["web"]}, ValueError,
         "source 'web' is removed at P=4, but weights gives it 1; give it 0"),
        ({"grown": {"code": range(7)}}, ValueError, "had 7 items and has 7; a source that lost"),
        ({"grown": {"code": range(5)}}, ValueError, "must be longer than before .append-only."),
        ({"grown": {"text": range(9)}}, ValueError, "'text', which is not one of"),
        ({"weights": {"web": 0}}, ValueError, "weights gives every source weight 0 from P=4"),
    ],
)  # fmt: skip
def test_bad_changes(kwargs: dict[str, Any], error: type, match: str) -> None:
    args = {"at": 4, "weights": {"web": 1, "code": 2}, **kwargs}
    with pytest.raises(error, match=match):
        before().changed(args.pop("at"), args.pop("weights"), **args)


def test_a_change_from_a_state_of_another_mixture_is_refused() -> None:
    state = _state(after(14), 9)
    with pytest.raises(ValueError, match=r"the state was saved over another mixture .*P=18"):
        before().changed(state, {"web": 1})
    assert after(14).changed(state, {"code": 1}).schedule[-1][0] == 18  # the mixture it had


def test_a_change_within_a_window_waits_for_its_end() -> None:
    mix = seekdata.Mixture([range(5), range(7)], [3, 1], length=12, window=4)
    with pytest.raises(ValueError, match=r"a change must start at a multiple of 4.*use 8"):
        mix.changed(6, [1, 1])
    state = {"epoch": 0, "position": 6, "n": 12}
    assert mix.changed(state, [1, 1]).schedule[-1][0] == 8  # the rest of the window: old


def test_a_gone_source_routes_and_signs_but_is_never_fetched() -> None:
    """A removed source built as Mixture.gone(length=n): the same stream and signature as with
    the real source; fetching it (a position before its removal) raises naming it."""
    real = after(14)
    gone = before().changed(
        14, NEW, add={"books": Source(3, 3)}, remove=["web"], grown={"code": Source(1, 10)}
    )
    gone.datasets[0] = seekdata.Mixture.gone(length=5)
    state = _state(real, 9)
    dl = loader(gone)
    dl.load_state_dict(state)  # after the removal: web is never read
    assert _same(_run(dl, range(1, 3)), _run(_resumed(real, state), range(1, 3)))
    with pytest.raises(RuntimeError, match=r"source 'web' is Mixture.gone \(removed\): it cannot"):
        gone[0]
    with pytest.raises(ValueError, match="length must be the removed source's length"):
        seekdata.Mixture.gone(length=0)


def _resumed(mix: seekdata.Mixture, state: dict[str, Any]) -> seekdata.StatefulDataLoader:
    dl = loader(mix)
    dl.load_state_dict(state)
    return dl


class Sharded:
    """A dataset of ``sum(shard_sizes)`` items in shards (for the shard-local order)."""

    def __init__(self, shard_sizes: list[int]) -> None:
        self.shard_sizes = shard_sizes

    def __len__(self) -> int:
        return sum(self.shard_sizes)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["feistel", "sequential", "shards"]),
    shards=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    new=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    more=st.lists(st.integers(1, 6), max_size=2),
    delivered=st.integers(0, 100),
    later=st.integers(0, 40),
)
def test_a_grown_source_epoch_is_a_permutation_with_its_consumed_head(
    kind: str, shards: list[int], new: list[int], more: list[int], delivered: int, later: int
) -> None:
    """A source of n0 items grown to n1 after delivering Q (epoch e_g = Q // n0, r = Q % n0
    consumed), maybe again later (``more``): epoch e_g is a permutation of [0, n1) whose first
    r items are unchanged; every later epoch is a permutation of the source then."""
    n0, n1 = sum(shards), sum(shards) + sum(new)
    dataset = Sharded(shards + new + more)
    growths = [(delivered, n1)]
    if more:
        growths.append((delivered + later, n1 + sum(more)))
    grown = SourceLengths(n0, 11, kind, dataset, growths)
    plain = make_order(kind, n0, 11, dataset=Sharded(shards))
    e_g, r = divmod(delivered, n0)
    start = delivered - r
    head = [grown.locate(q) for q in range(start, start + r)]
    assert head == [(e_g, int(plain.indices(e_g, np.array([x]))[0])) for x in range(r)]
    if isinstance(plain, Feistel):
        assert all(i == plain.indices(e_g, np.array([x]))[0] for x, (_, i) in enumerate(head))
    n2 = n1 + sum(more)
    by_epoch: dict[int, list[int]] = {}
    for q in range(start, start + 4 * n2):
        e, i = grown.locate(q)
        by_epoch.setdefault(e, []).append(i)
    assert min(by_epoch) == e_g
    twice = bool(more) and delivered + later < start + n1  # grew twice within epoch e_g
    for e in sorted(by_epoch)[:-1]:  # whole epochs: the source as it stood at their end
        n = n2 if twice or (more and e > e_g + later // n1 + 1) else len(by_epoch[e])
        assert len(by_epoch[e]) == (n if e > e_g or twice else n1), (e, len(by_epoch[e]))
        assert sorted(by_epoch[e]) == list(range(len(by_epoch[e]))), e
        assert len(by_epoch[e]) in (n1, n2)
    if kind == "sequential":
        assert by_epoch[e_g][:n1] == list(range(n1))


def test_state_after_ten_changes_stays_small() -> None:
    """The JSON state after 10 changes (each adding, removing and growing a source) fits in
    4 KB, for K = 3 named sources (weights listed) and K = 1,000 (counts instead)."""
    for k, names in ((3, True), (1000, False)):
        srcs = [range(1000 + j) for j in range(k)]
        mix = seekdata.Mixture(
            {f"s{j}": s for j, s in enumerate(srcs)} if names else srcs, [1] * k, length=10**6
        )
        key = (lambda j: f"s{j}") if names else (lambda j: j)
        for c in range(1, 11):
            size = len(mix.datasets)
            weights = [1] * size + [1]
            weights[c - 1] = 0
            add = {f"s{size}": range(50)} if names else [range(50)]
            mix = mix.changed(c * 10**5, weights, add=add, remove=[key(c - 1)],
                              grown={key(c): range(2000 + c)})  # fmt: skip
        state = _state(mix, 0)
        state.update(position=0, epoch=2)  # after every change
        dl = loader(mix)
        dl.load_state_dict(state)
        saved = dl.state_dict()
        assert len(saved["source"]["history"]) == 10
        assert len(json.dumps(saved)) <= 4096, (k, len(json.dumps(saved)))


def test_the_changes_benchmark_runs_and_its_state_stays_small(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """benchmarks/mixture.py --only-schedule writes the rows docs/mixtures.md cites for 10
    changes (no timing is asserted): the history holds 10 records and the state <= 4 KB. The run
    is shared with test_mixture_schedule.py's test of its schedule table."""
    from tests.helpers.scripts import MIXTURE_SCHEDULE_RUN, script_once

    folder, _ = script_once(tmp_path_factory, *MIXTURE_SCHEDULE_RUN)
    rows = json.loads((folder / "mixture_schedule.json").read_text())["changes"]
    assert [(r["K"], r["changes"]) for r in rows] == [("16 -> 26", 10), ("1000 -> 1010", 10)]
    assert all(r["locate (us)"] > 0 and r["state (bytes of JSON)"] <= 4096 for r in rows)


class _ShardedSource(Source):
    """A mixture source in shards: ``Source`` items with ``shard_sizes``."""

    def __init__(self, k: int, shard_sizes: list[int]) -> None:
        super().__init__(k, sum(shard_sizes))
        self.shard_sizes = shard_sizes


@pytest.mark.parametrize("order", ["shards", "feistel"])
def test_a_sharded_source_grows_by_whole_shards_as_the_sampler_checks(order: str) -> None:
    """The plain sampler's check, applied to a mixture's grown source: a partial shard appended
    (its last shard extended) is refused; whole shards appended are accepted."""
    old = _ShardedSource(0, [4, 4, 4])
    mix = seekdata.Mixture({"s": old, "t": Source(1, 6)}, [1, 1], seed=2, order=order)
    mix.changed(6, [1, 1], grown={"s": _ShardedSource(0, [4, 4, 4, 4, 2])})
    with pytest.raises(seekdata.StateMismatchError, match=r"grown source 's': a sharded dataset "
                       r"grows by whole shards, so 12 items .* hold 14 there"):  # fmt: skip
        mix.changed(6, [1, 1], grown={"s": _ShardedSource(0, [4, 4, 6, 3])})
