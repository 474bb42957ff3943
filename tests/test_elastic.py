"""seekdata.elastic.per_rank_batch_size: the global batch ÷ the world size of this start, and a
loader built with it resumes a checkpoint written on another world size (one process)."""

from __future__ import annotations

import pytest

import seekdata
from seekdata.elastic import per_rank_batch_size


def test_the_global_batch_divided_by_the_world() -> None:
    assert [per_rank_batch_size(48, w) for w in (1, 2, 4, 6, 48)] == [48, 24, 12, 8, 1]


def test_the_world_size_defaults_to_torchruns_environment(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert per_rank_batch_size(16) == 4
    monkeypatch.delenv("WORLD_SIZE")
    assert per_rank_batch_size(16) == 16  # one process


def test_a_world_that_does_not_divide_the_global_batch_is_refused_with_the_sizes_that_do() -> None:
    with pytest.raises(ValueError) as e:
        per_rank_batch_size(16, 3)
    assert str(e.value) == (
        "per_rank_batch_size: the world size must divide the global batch size; got global "
        "batch 16 on 3 ranks (16 % 3 = 1); run on a world size that divides it (1, 2, 4, 8, 16: "
        "with torchrun, every node count of --nnodes=MIN:MAX times --nproc-per-node), or choose "
        "a global batch that 3 divides"
    )
    with pytest.raises(
        ValueError, match=r"\(1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 20, \.\.\.: with"
    ):
        per_rank_batch_size(240, 7)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((16.0, 2), TypeError, "global_batch_size must be a positive int; got float 16.0"),
        ((0, 2), ValueError, "global_batch_size must be a positive int; got 0"),
        ((16, True), TypeError, "world_size must be a positive int; got bool True"),
        ((16, 0), ValueError, "world_size must be a positive int; got 0"),
    ],
)
def test_bad_arguments(args, error, match) -> None:
    with pytest.raises(error, match=match):
        per_rank_batch_size(*args)


def test_a_loader_built_for_the_new_world_resumes_a_checkpoint_of_another() -> None:
    """The script shape of examples/elastic_train.py, every rank in one process: a state saved
    on 4 ranks × 4 loads on 2 ranks × per_rank_batch_size(16, 2) and continues the global
    stream; on 3 ranks the batch size is refused before a loader is built."""
    data = list(range(64))

    def loaders(world: int) -> list[seekdata.StatefulDataLoader]:
        batch = per_rank_batch_size(16, world)
        return [
            seekdata.StatefulDataLoader(
                data, batch_size=batch, seed=3,
                sampler=seekdata.DistributedSampler(data, world, rank, seed=3),
            )
            for rank in range(world)
        ]  # fmt: skip

    def steps(ranks: list[seekdata.StatefulDataLoader]) -> list[list[int]]:
        per_rank = [[b.tolist() for b in loader] for loader in ranks]
        return [sorted(i for part in step for i in part) for step in zip(*per_rank, strict=True)]

    reference = steps(loaders(4))
    four = loaders(4)
    for loader in four:
        next(iter(loader))
    two = loaders(2)
    for loader in two:
        loader.load_state_dict(four[0].state_dict())
    assert steps(two) == reference[1:]
    with pytest.raises(ValueError, match="16 % 3 = 1"):
        loaders(3)
