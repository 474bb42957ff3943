"""seed=None: torch's seed decides the run; at resume the checkpoint decides, never the new
process's torch seed; under DDP every rank takes rank 0's seed."""

from __future__ import annotations

import json
import logging
import pathlib
import warnings

import pytest
import torch

import seekdata
from tests.helpers.datasets import GlobalRNGAug, batches_equal
from tests.helpers.paths import SCRIPTS
from tests.helpers.ranks import run_ranks


def build(num_workers: int = 0, **kw) -> seekdata.StatefulDataLoader:
    return seekdata.StatefulDataLoader(
        GlobalRNGAug(11), batch_size=3, shuffle=True, num_workers=num_workers, **kw
    )


def run_under(torch_seed: int, **kw) -> list:
    torch.manual_seed(torch_seed)
    return list(build(**kw))


def by_index(batches: list) -> dict[int, torch.Tensor]:
    return {int(i): x for b in batches for i, x in zip(b["index"], b["x"], strict=True)}


def test_torch_manual_seed_decides_order_and_sample_randomness() -> None:
    """Before, both runs were seed 0 whatever torch.manual_seed said."""
    one, two, again = run_under(1), run_under(2), run_under(1)
    assert batches_equal(one, again)
    order_one = [int(i) for b in one for i in b["index"]]
    order_two = [int(i) for b in two for i in b["index"]]
    assert order_one != order_two and sorted(order_one) == sorted(order_two)
    x1, x2 = by_index(one), by_index(two)
    assert not any(torch.equal(x1[i], x2[i]) for i in x1)  # per-sample randomness too


def test_the_default_seed_is_hashed_from_torchs_and_stored_in_the_state() -> None:
    torch.manual_seed(1)
    a = build()
    torch.manual_seed(2)
    b = build()
    assert a.seed != b.seed and a.seed not in (1, 2) and 0 <= a.seed < 2**63
    state = a.state_dict()
    assert state["sample_seed"] == state["seed"] == a.seed  # the default sampler's too
    assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize("workers", [0, 2])
def test_the_checkpoint_decides_the_seed_at_resume(workers) -> None:
    full = run_under(1)
    torch.manual_seed(1)
    first = build()
    it = iter(first)
    head = [next(it), next(it)]
    state = json.loads(json.dumps(first.state_dict()))
    torch.manual_seed(2)  # the resumed process is seeded differently, or not at all
    resumed = build(num_workers=workers)
    resumed.load_state_dict(state)
    assert resumed.seed == first.seed and resumed.state_dict() == state
    assert batches_equal(full, head + list(resumed))
    assert batches_equal(run_under(1), list(build_from(state)))  # and the next epoch, too


def build_from(state: dict) -> seekdata.StatefulDataLoader:
    torch.manual_seed(3)
    loader = build()
    loader.load_state_dict({**state, "epoch": 0, "position": 0, "step": 0})
    return loader


def test_a_sampler_state_gives_our_default_sampler_its_seed() -> None:
    torch.manual_seed(1)
    ref = build()
    order = [int(i) for b in ref for i in b["index"]]
    sampler_state = ref.sampler.state_dict()
    sampler_state.update(epoch=0, position=0, exhausted=False)
    torch.manual_seed(2)
    loader = build()
    loader.load_state_dict(sampler_state)
    assert loader.seed == ref.seed
    assert [int(i) for b in loader for i in b["index"]] == order


def test_an_explicit_seed_that_differs_still_raises() -> None:
    state = build(seed=5).state_dict()
    with pytest.raises(seekdata.StateMismatchError, match="seed is 5 in the checkpoint but 6"):
        build(seed=6).load_state_dict(state)
    torch.manual_seed(1)
    loose = build().state_dict()
    with pytest.raises(seekdata.StateMismatchError, match="pass seed="):
        build(seed=6).load_state_dict(loose)


def test_a_users_sampler_keeps_its_own_explicit_seed() -> None:
    """seekdata.DistributedSampler keeps torch's seed=0 default: it is checked, not adopted;
    the loader's per-sample seed is adopted."""
    ds = GlobalRNGAug(11)

    def with_sampler(sampler_seed: int) -> seekdata.StatefulDataLoader:
        sampler = seekdata.DistributedSampler(ds, 1, 0, seed=sampler_seed)
        return seekdata.StatefulDataLoader(ds, batch_size=3, sampler=sampler)

    torch.manual_seed(1)
    first = with_sampler(0)
    assert first.sampler.seed == 0
    state = first.state_dict()
    torch.manual_seed(2)
    same = with_sampler(0)
    same.load_state_dict(state)
    assert same.seed == first.seed
    with pytest.raises(seekdata.StateMismatchError, match="seed is 0 in the checkpoint but 1"):
        with_sampler(1).load_state_dict(state)


def test_a_generator_decides_the_seed_as_in_torch() -> None:
    def with_generator(s: int) -> list:
        return list(build(generator=torch.Generator().manual_seed(s)))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # used, so not "ignored"
        a, b, c = with_generator(1), with_generator(2), with_generator(1)
    assert batches_equal(a, c) and not batches_equal(a, b)
    torch.manual_seed(7)
    assert batches_equal(a, with_generator(1))  # the generator's seed, not the global one
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        build(generator=3)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for k in range(6):
            yield torch.tensor(k), torch.rand(1)


def test_iterable_datasets_follow_the_same_rule(caplog) -> None:
    caplog.set_level(logging.ERROR)

    def make() -> seekdata.StatefulDataLoader:
        return seekdata.StatefulDataLoader(Stream(), batch_size=2)

    torch.manual_seed(1)
    full = list(make())
    torch.manual_seed(2)
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(full, make(), strict=True))
    torch.manual_seed(1)
    first = make()
    it = iter(first)
    head = [next(it)]
    state = first.state_dict()
    del it
    torch.manual_seed(2)
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.seed == first.seed
    got = head + list(resumed)
    assert all(torch.equal(a[1], b[1]) for a, b in zip(full, got, strict=True))


def test_ranks_with_different_torch_seeds_agree_on_rank_0s(tmp_path: pathlib.Path) -> None:
    run_ranks(SCRIPTS / "_seed_worker.py", 2, [str(tmp_path / "out{rank}.json")], timeout=120)
    r0, r1 = (json.loads((tmp_path / f"out{r}.json").read_text()) for r in range(2))
    assert r0 == r1  # one seed, one order, one per-sample stream
    torch.manual_seed(1000)  # rank 0's torch seed decides
    assert build().seed == r0["seed"]


def test_adopting_a_seed_restarts_persistent_workers() -> None:
    """Persistent workers hold the dataset keyed by the old seed: adopting the checkpoint's
    seed must reach them."""
    full = run_under(1)
    torch.manual_seed(1)
    first = build()
    it = iter(first)
    head = [next(it)]
    state = first.state_dict()
    torch.manual_seed(2)
    loader = build(num_workers=1, persistent_workers=True)
    list(loader)  # workers started under the seed derived from torch seed 2
    loader.load_state_dict(state)
    assert batches_equal(full, head + list(loader))
