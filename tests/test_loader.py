"""StatefulDataLoader: exact resume under any worker count, persistent workers and epoch ends."""

from __future__ import annotations

import functools
import io
import itertools
import json
import random
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import seekdata
import seekdata.state
from seekdata.testing import assert_exact_resume, first_difference
from tests.helpers.datasets import GlobalRNGAug, SampleRNGAug, batches_equal


def make(ds_cls=GlobalRNGAug, n=10, num_workers=0, persistent_workers=False, **kw):
    return seekdata.StatefulDataLoader(
        ds_cls(n),
        batch_size=3,
        shuffle=True,
        seed=5,
        num_workers=num_workers,
        persistent_workers=persistent_workers and num_workers > 0,
        **kw,
    )


MATRIX = list(itertools.product([0, 1, 2], [False, True], [GlobalRNGAug, SampleRNGAug]))


@pytest.mark.parametrize(
    "workers, persistent, ds_cls",
    MATRIX,
    ids=[f"w{w}-{'persist' if p else 'fresh'}-{d.__name__}" for w, p, d in MATRIX],
)
def test_exactness_matrix(workers, persistent, ds_cls) -> None:
    """Every step of two epochs (epoch ends included), resumed on another worker count."""
    factory = functools.partial(
        make, ds_cls, 10, num_workers=workers, persistent_workers=persistent
    )
    resume_workers = (workers + 2) % 3
    checked = assert_exact_resume(
        factory,
        epochs=2,
        resume_kwargs={
            "num_workers": resume_workers,
            "persistent_workers": persistent and resume_workers > 0,
        },
    )
    assert checked == 2 * 4 + 1


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_loop_is_exact_too(workers) -> None:
    assert_exact_resume(
        functools.partial(make, GlobalRNGAug, 10, num_workers=workers), epochs=3, set_epoch=True
    )


def test_augmentation_does_not_depend_on_worker_count() -> None:
    runs = [list(make(num_workers=w)) for w in (0, 1, 2)]
    assert batches_equal(runs[0], runs[1]) and batches_equal(runs[0], runs[2])
    # ... and a sample's randomness is its own: the same index gets the same noise
    # whichever batch or epoch position it lands in within an epoch
    by_index = {}
    for batch in runs[0]:
        for i, x in zip(batch["index"].tolist(), batch["x"], strict=True):
            by_index[i] = x
    with seekdata.rng.sample_scope(5, 0, 7):
        expected = torch.full((3,), 7.0) + torch.rand(3)
    assert torch.equal(by_index[7], expected)


def test_epochs_reshuffle_and_reaugment() -> None:
    loader = make()
    e0, e1 = list(loader), list(loader)
    assert not torch.equal(torch.cat([b["index"] for b in e0]), torch.cat([b["index"] for b in e1]))
    assert sorted(torch.cat([b["index"] for b in e1]).tolist()) == list(range(10))
    x0 = {int(i): x for b in e0 for i, x in zip(b["index"], b["x"], strict=True)}
    x1 = {int(i): x for b in e1 for i, x in zip(b["index"], b["x"], strict=True)}
    assert not torch.equal(x0[3], x1[3])  # a new epoch draws new augmentation


def test_main_process_global_rng_untouched_and_never_drawn_without_step_rng() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    loader = make(step_rng=False)
    for _ in loader:
        pass
    list(iter(loader))
    after = (torch.rand(2), np.random.rand(), random.random())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    assert torch.equal(after[0], torch.rand(2)) and after[1:] == (np.random.rand(), random.random())


def test_dropout_after_resume_is_undisturbed() -> None:
    """torch's loaders draw a base seed from global RNG at every iter(); ours never do, so a
    model's Dropout sees the same numbers whether or not the loader was resumed."""

    def train(resume_after: int | None) -> list[torch.Tensor]:
        torch.manual_seed(1)
        drop = torch.nn.Dropout(0.5)
        loader = make()
        outs = []
        it = iter(loader)
        for k, batch in enumerate(it):
            outs.append(drop(batch["x"]))
            if resume_after is not None and k + 1 == resume_after:
                state = loader.state_dict()
                rng_state = torch.get_rng_state()
                loader = make()
                loader.load_state_dict(state)
                torch.set_rng_state(rng_state)
                outs.extend(drop(b["x"]) for b in loader)
                break
        return outs

    ref = train(None)
    for k in (1, 2):
        got = train(k)
        assert len(got) == len(ref) and all(
            torch.equal(a, b) for a, b in zip(ref, got, strict=True)
        )


def test_world_size_change_continues_the_global_stream() -> None:
    ds = GlobalRNGAug(24)

    def loaders(world):
        return [
            seekdata.StatefulDataLoader(
                ds, batch_size=2, sampler=seekdata.DistributedSampler(ds, world, r, seed=1), seed=1
            )
            for r in range(world)
        ]

    two = loaders(2)
    iters = [iter(x) for x in two]
    seen = [next(it) for it in iters for _ in range(2)]  # 2 steps on each of 2 ranks
    state = two[0].state_dict()
    assert state == two[1].state_dict() and state["position"] == 8
    three = loaders(3)
    for x in three:
        x.load_state_dict(json.loads(json.dumps(state)))
    rest = [b for x in three for b in x]
    got = torch.cat([b["index"] for b in seen + rest]).tolist()
    # 8 consumed + 16 remaining = the epoch; 16 over 3 ranks pads 2 from the epoch's head
    assert set(got) == set(range(24)) and len(got) == 24 + 2
    # the same sample gets the same augmentation on any world size
    x_by = {int(i): x for b in seen + rest for i, x in zip(b["index"], b["x"], strict=True)}
    ref = {
        int(i): x
        for b in seekdata.StatefulDataLoader(ds, batch_size=4, seed=1)
        for i, x in zip(b["index"], b["x"], strict=True)
    }
    assert all(torch.equal(x_by[i], ref[i]) for i in range(24))


def test_state_is_small_json_and_weights_only_loadable() -> None:
    loader = make(num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert json.loads(json.dumps(state)) == state and len(json.dumps(state)) <= 512
    buf = io.BytesIO()
    torch.save({"loader": state}, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["loader"] == state
    assert state["position"] == 3 and state["step"] == 1  # prefetched batches do not count


@pytest.mark.parametrize(
    "field, value",
    [
        ("n", 11),
        ("seed", 6),
        ("sample_seed", 6),
        ("batch_size", 4),
        ("shuffle", False),
        ("order", "torch"),
        ("batch_drop_last", True),
        ("kind", "something"),
    ],
)
def test_mismatched_states_name_the_field(field, value) -> None:
    state = make().state_dict()
    state[field] = value
    with pytest.raises(seekdata.StateMismatchError, match=field):
        make().load_state_dict(state)


@pytest.mark.parametrize(
    "state, error, match",
    [
        ({}, seekdata.StateMismatchError, "state is empty"),
        ("x", TypeError, "state must be a dict"),
        ({"epoch": 1, "position": 0}, seekdata.StateMismatchError, "no 'seekdata' version key"),
        (
            {"seekdata": seekdata.state.VERSION + 1, "kind": "loader", "epoch": 0, "position": 0},
            seekdata.StateMismatchError,
            "upgrade seekdata",
        ),
    ],
)
def test_bad_states(state, error, match) -> None:
    loader = make()
    before = loader.state_dict()
    with pytest.raises(error, match=match):
        loader.load_state_dict(state)
    assert loader.state_dict() == before


def test_missing_key_is_named() -> None:
    state = make().state_dict()
    del state["batch_size"]
    with pytest.raises(seekdata.StateMismatchError, match="missing 'batch_size'"):
        make().load_state_dict(state)


@pytest.mark.parametrize("workers, persistent", [(0, False), (2, False), (2, True)])
def test_load_while_an_iterator_is_live_follows_torchdata(workers, persistent) -> None:
    """torchdata accepts load_state_dict with a live iterator; the next iter() starts from the
    loaded state (this raised RuntimeError before)."""
    ref = list(make(num_workers=workers, persistent_workers=persistent))
    donor = make()
    donor_it = iter(donor)
    next(donor_it)
    state = donor.state_dict()  # one batch consumed
    loader = make(num_workers=workers, persistent_workers=persistent)
    it = iter(loader)
    for _ in range(3):
        next(it)
    loader.load_state_dict(state)
    assert loader.state_dict() == state
    with pytest.raises(RuntimeError, match="call iter\\(loader\\)"):
        next(it)  # the old iterator no longer moves the cursor
    assert loader.state_dict() == state
    assert batches_equal(ref[1:], list(loader))


@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("iterable", [False, True])
def test_a_new_iterator_supersedes_the_live_one(workers, persistent, iterable) -> None:
    """One cursor, one iterator moving it: it2, it1, it2, it1 used to hand out steps 2, 2, 3, 3
    with the state saying 6 (and a resume skipping 4 and 5). The older iterator now raises,
    and the state counts exactly the batches handed out."""
    if iterable:
        from tests.helpers.datasets import Stream

        loader = seekdata.StatefulDataLoader(
            Stream(), batch_size=2, num_workers=workers, persistent_workers=persistent, seed=1
        )
        ref = list(seekdata.StatefulDataLoader(Stream(), batch_size=2, num_workers=workers, seed=1))
    else:
        loader = make(num_workers=workers, persistent_workers=persistent)
        ref = list(make())
    first = iter(loader)
    got = [next(first), next(first)]
    second = iter(loader)  # continues from the cursor: step 2
    with pytest.raises(RuntimeError, match=r"replaced by a later iter\(\)"):
        next(first)
    got.append(next(second))
    if iterable:  # a stream cannot seek: a new iter() starts the epoch over, as torch's does
        ids = [b["k"].tolist() for b in got + list(second)]  # (persistent workers' RNG goes on)
        assert ids == [b["k"].tolist() for b in ref[:2] + ref]
        return
    assert loader.state_dict()["step"] == 3
    got += list(second)
    assert batches_equal(ref, got)


def test_a_world_size_or_worker_change_is_accepted() -> None:
    state = make().state_dict()
    state["world_size"] = 8
    make(num_workers=1).load_state_dict(state)


def test_unseekable_sampler_replays_indices_only_and_warns() -> None:
    ds = GlobalRNGAug(12)

    def build():
        return seekdata.StatefulDataLoader(
            ds, batch_size=2, sampler=list(reversed(range(12))), seed=2
        )

    ref = list(build())
    first = build()
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    resumed = build()
    resumed.load_state_dict(state)
    with pytest.warns(UserWarning, match="cannot seek"):
        rest = list(resumed)
    assert batches_equal(ref, head + rest)


@pytest.mark.parametrize("batch_size", [1, 5])
def test_a_sampler_longer_than_the_dataset_resumes_at_every_step(batch_size: int) -> None:
    """A replacement sampler draws more samples than the dataset holds: the replay cursor
    counts its batches past len(dataset) instead of reading that count as the epoch's end
    (which resumed into the next epoch and silently dropped the rest)."""

    def build() -> seekdata.StatefulDataLoader:
        g = torch.Generator().manual_seed(0)
        sampler = torch.utils.data.RandomSampler(range(4), True, num_samples=12, generator=g)
        return seekdata.StatefulDataLoader(list(range(4)), batch_size=batch_size,
                                           sampler=sampler)  # fmt: skip

    full = [b.tolist() for b in build()]
    assert len(full) > 4 // batch_size  # more batches than the dataset's length would allow
    for k in range(len(full) + 1):
        first = build()
        it = iter(first)
        head = [next(it).tolist() for _ in range(k)]
        state = json.loads(json.dumps(first.state_dict()))
        resumed = build()
        resumed.load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the replay warning
            rest = [b.tolist() for b in resumed]
        assert head + rest == full, k
        assert state["exhausted"] is False and state["step"] == k


def test_torch_distributed_sampler_works_as_replay() -> None:
    ds = GlobalRNGAug(12)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    loader = seekdata.StatefulDataLoader(ds, batch_size=2, sampler=sampler, seed=3)
    loader.set_epoch(1)
    ref = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    ref.set_epoch(1)
    assert torch.cat([b["index"] for b in loader]).tolist() == list(ref)


def test_batch_size_none_and_batch_sampler() -> None:
    ds = GlobalRNGAug(5)
    single = list(seekdata.StatefulDataLoader(ds, batch_size=None, seed=0))
    assert len(single) == 5 and single[0]["x"].shape == (3,)
    bs = torch.utils.data.BatchSampler(range(5), 2, False)
    batched = list(seekdata.StatefulDataLoader(ds, batch_sampler=bs, seed=0))
    assert [b["index"].tolist() for b in batched] == [[0, 1], [2, 3], [4]]


def test_batch_transform_needs_batches() -> None:
    """It did nothing with batch_size=None (single samples are never collated): now refused;
    with a batch sampler it applies to every batch."""
    with pytest.raises(ValueError, match="batch_transform applies to batches"):
        seekdata.StatefulDataLoader(
            GlobalRNGAug(5), batch_size=None, batch_transform=lambda b, g: b
        )

    def tag(batch, gen):
        return {**batch, "tagged": torch.ones(len(batch["index"]))}

    bs = torch.utils.data.BatchSampler(range(5), 2, False)
    loader = seekdata.StatefulDataLoader(GlobalRNGAug(5), batch_sampler=bs, batch_transform=tag)
    assert all("tagged" in b for b in loader)


def test_drop_last_and_len() -> None:
    loader = seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, drop_last=True, seed=0)
    assert len(loader) == 3 and len(list(loader)) == 3
    assert loader.state_dict()["position"] == 10  # the dropped tail is part of the ended epoch
    assert len(seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3)) == 4


def test_in_order_false_refuses_to_checkpoint() -> None:
    loader = make(in_order=False)
    with pytest.raises(ValueError, match="in_order=True"):
        loader.state_dict()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        seekdata.StatefulDataLoader(
            GlobalRNGAug(4),
            sampler=seekdata.DistributedSampler(GlobalRNGAug(4), 1, 0, shuffle=False),
            shuffle=True,
        )
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        seekdata.StatefulDataLoader(GlobalRNGAug(4), batch_size=0)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        seekdata.StatefulDataLoader(GlobalRNGAug(4), seed=-2)
    with pytest.raises(TypeError, match="IterableDataset"):
        seekdata.StatefulDataLoader(torch.utils.data.IterableDataset())
    with pytest.raises(ValueError, match="at least 1 sample"):
        seekdata.StatefulDataLoader([])


def test_first_difference_reports_field_and_size() -> None:
    a = {"x": torch.zeros(3), "y": [1, 2]}
    b = {"x": torch.tensor([0.0, 0.5, 0.0]), "y": [1, 2]}
    assert first_difference(a, b) == "batch['x']: values differ, max |difference| = 0.5"

    class OwnRNG(GlobalRNGAug):  # keeps a stateful generator of its own: not resumable
        def __init__(self, n):
            super().__init__(n)
            self.rng = np.random.RandomState(0)

        def __getitem__(self, i):
            return {"index": torch.tensor(i), "x": torch.tensor(self.rng.rand())}

    def bad_factory(**kw):
        return seekdata.StatefulDataLoader(OwnRNG(6), batch_size=2, seed=0, **kw)

    with pytest.raises(AssertionError, match=r"diverges at step 1: batch\['x'\]: values differ"):
        assert_exact_resume(bad_factory, epochs=1, stop_at=[1])


def test_resume_in_a_fresh_interpreter(tmp_path) -> None:
    script = textwrap.dedent("""
        import json, sys, torch
        sys.path.insert(0, %r)
        import seekdata
        from tests.helpers.datasets import GlobalRNGAug
        loader = seekdata.StatefulDataLoader(GlobalRNGAug(10), batch_size=3, shuffle=True,
                                             seed=5, num_workers=int(sys.argv[2]))
        if sys.argv[1] == "save":
            it = iter(loader)
            for _ in range(2):
                next(it)
            print(json.dumps(loader.state_dict()))
        else:
            loader.load_state_dict(json.loads(sys.stdin.read()))
            torch.save([b for b in loader], sys.argv[3])
    """) % str(__import__("pathlib").Path(__file__).resolve().parents[1])
    path = tmp_path / "s.py"
    path.write_text(script)
    saved = subprocess.run(
        [sys.executable, str(path), "save", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    out = tmp_path / "rest.pt"
    subprocess.run(
        [sys.executable, str(path), "load", "2", str(out)],
        input=saved,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rest = torch.load(out, weights_only=True)
    ref = list(make())
    assert batches_equal(ref[2:], rest)


@pytest.mark.parametrize(
    "n, b, drop_last", [(10, 3, False), (10, 3, True), (9, 3, False), (1, 4, False)]
)
def test_each_epoch_is_the_dataset_once(n, b, drop_last) -> None:
    loader = seekdata.StatefulDataLoader(
        GlobalRNGAug(n), batch_size=b, shuffle=True, drop_last=drop_last, seed=0
    )
    for _ in range(3):
        got = torch.cat([x["index"] for x in loader]).tolist()
        assert len(got) == len(set(got)) == (n // b * b if drop_last else n)


@pytest.mark.parametrize("workers", [0, 2])
def test_two_resumes_in_one_epoch_stay_aligned(workers) -> None:
    """Preempted twice in one epoch: the second resume must continue from the first's progress."""
    ref = list(make(n=20))
    first = make(n=20)
    it = iter(first)
    got = [next(it) for _ in range(2)]
    state = first.state_dict()
    del it
    second = make(n=20, num_workers=workers)
    second.load_state_dict(state)
    it = iter(second)
    got += [next(it) for _ in range(2)]
    state = second.state_dict()
    assert state["position"] == 12 and state["step"] == 4
    del it
    third = make(n=20)
    third.load_state_dict(json.loads(json.dumps(state)))
    got += list(third)
    assert batches_equal(ref, got)


@pytest.mark.parametrize("stop", [0, 1, 4, 5])
def test_loading_a_state_gives_back_the_same_state(stop) -> None:
    loader = make()
    it = iter(loader)
    for _ in range(min(stop, 4)):
        next(it)
    if stop == 5:
        list(it)  # finished: exhausted
    state = loader.state_dict()
    del it
    fresh = make(num_workers=1)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_drop_last_resume_is_exact() -> None:
    assert_exact_resume(
        functools.partial(make, GlobalRNGAug, 11, num_workers=0, drop_last=True),
        epochs=2,
        resume_kwargs={"num_workers": 2},
    )


def masking_collate(samples):
    """Like a language-model collator: random masking with torch's global RNG at collation."""
    batch = torch.utils.data.default_collate(samples)
    batch["mask"] = torch.bernoulli(torch.full((len(samples), 4), 0.3))
    return batch


def test_random_collate_is_keyed_by_the_batch() -> None:
    def build(**kw):
        return seekdata.StatefulDataLoader(
            GlobalRNGAug(10), batch_size=3, shuffle=True, seed=5, collate_fn=masking_collate, **kw
        )

    torch.manual_seed(0)
    runs = [list(build(num_workers=w, step_rng=False)) for w in (0, 2)]
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))  # the collate phase did not consume our RNG
    assert batches_equal(runs[0], runs[1])  # the same masks whatever the worker count
    assert not all(torch.equal(b["mask"], runs[0][0]["mask"]) for b in runs[0][1:])
    assert_exact_resume(build, epochs=2, resume_kwargs={"num_workers": 1}, stop_at=[1, 3, 4, 6])


def test_is_a_dataloader_with_its_attributes() -> None:
    """Frameworks check isinstance(loader, DataLoader) and read these attributes."""
    loader = make(num_workers=1, pin_memory=False)
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert (loader.batch_size, loader.num_workers, loader.drop_last) == (3, 1, False)
    assert isinstance(loader.sampler, seekdata.DistributedSampler)
    assert loader.dataset is not None and loader.multiprocessing_context is None
    assert callable(loader.collate_fn) and len(loader) == 4


def test_torchdatas_constructor_is_ours() -> None:
    """A torchdata user changes one import: every torchdata parameter, same kind and default
    (snapshot_every_n_steps was a TypeError before)."""
    import inspect

    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    ours = inspect.signature(seekdata.StatefulDataLoader).parameters
    theirs = inspect.signature(TorchdataLoader).parameters
    for name, p in theirs.items():
        assert (ours[name].kind, ours[name].default) == (p.kind, p.default), name
    positional = [n for n, p in theirs.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert list(ours)[: len(positional)] == positional  # positional order too


def test_snapshot_every_n_steps_is_stored_and_exactness_does_not_depend_on_it() -> None:
    loader = make(snapshot_every_n_steps=4)
    assert loader.snapshot_every_n_steps == 4
    assert_exact_resume(
        functools.partial(make, snapshot_every_n_steps=4),
        epochs=1,
        resume_kwargs={"snapshot_every_n_steps": 1, "num_workers": 1},
    )
    assert make(snapshot_every_n_steps=0).snapshot_every_n_steps == 0  # torchdata: on request
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="snapshot_every_n_steps must be an int >= 0"):
            make(snapshot_every_n_steps=bad)


def test_assign_rank_is_the_documented_name_and_shard_its_old_one() -> None:
    """``shard`` meant "become rank r" beside TarShards' shards of data: ``assign_rank`` says
    so; ``shard`` stays, the same call, without a warning."""

    def rank1(call: str) -> list[list[int]]:
        loader = seekdata.StatefulDataLoader(list(range(16)), batch_size=4, shuffle=True, seed=0)
        getattr(loader, call)(2, 1)
        return [batch.tolist() for batch in loader]

    whole = seekdata.DistributedSampler(list(range(16)), num_replicas=2, rank=1, seed=0)
    assert [i for batch in rank1("assign_rank") for i in batch] == list(whole)
    assert rank1("shard") == rank1("assign_rank")
