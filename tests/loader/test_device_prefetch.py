"""``device=`` / ``device_prefetch=``: batches moved ahead of the step, counted at hand-out.

CI has no GPU: ``device="cpu"`` runs the same look-ahead without a copy, and a fake stream API
runs the stream/event code on the CPU. tests/gpu_device_prefetch_check.py checks a CUDA node.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import seekdata
from seekdata._loader import device as _device
from seekdata._loader.fetch import FailedBatch
from seekdata.testing import assert_exact_resume, first_difference
from tests.helpers.paths import ROOT

BAD = {4, 11}  # samples of Noisy(bad=True) that raise


class Noisy(torch.utils.data.Dataset):
    """Sample i: its index and noise from global RNG (keyed per sample by the loader)."""

    def __init__(self, n: int = 10, bad: bool = False) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.bad and i in BAD:
            raise ValueError(f"sample {i} is corrupt")
        return {"i": torch.tensor(i), "x": torch.rand(3)}


class Stream(torch.utils.data.IterableDataset):
    """Shards its range over workers; noise from global RNG (keyed per worker)."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for k in range(start, self.n, step):
            yield {"i": torch.tensor(k), "x": torch.rand(2)}


@pytest.fixture(autouse=True)
def quiet_fast_forward_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)  # torchdata logs its fast-forward at resume


def make(kind: str = "map", num_workers: int = 0, **kw: Any) -> seekdata.StatefulDataLoader:
    if kind == "map":
        return seekdata.StatefulDataLoader(
            Noisy(), batch_size=3, shuffle=True, seed=7, num_workers=num_workers, **kw
        )
    return seekdata.StatefulDataLoader(
        Stream(), batch_size=3, seed=7, num_workers=num_workers, **kw
    )


def walk(loader: seekdata.StatefulDataLoader, epochs: int = 2) -> list[tuple[Any, Any]]:
    """(batch, state_dict() right after it) at every hand-out; (None, state) at each epoch's
    start and end; and the caller's next torch.rand after each batch (the step RNG)."""
    out: list[tuple[Any, Any]] = [(None, loader.state_dict())]
    for _ in range(epochs):
        for batch in loader:
            out.append(((batch, torch.rand(2)), loader.state_dict()))
        out.append((None, loader.state_dict()))
    return out


def same_walk(a: list[tuple[Any, Any]], b: list[tuple[Any, Any]]) -> None:
    assert len(a) == len(b)
    for k, ((batch_a, state_a), (batch_b, state_b)) in enumerate(zip(a, b, strict=True)):
        assert first_difference(batch_a, batch_b) is None, (k, first_difference(batch_a, batch_b))
        assert state_a == state_b, k


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_same_batches_step_rng_and_state_at_every_hand_out(
    kind: str, workers: int, depth: int
) -> None:
    torch.manual_seed(0)
    want = walk(make(kind, workers))
    torch.manual_seed(0)
    got = walk(make(kind, workers, device="cpu", device_prefetch=depth))
    assert len(want) == 2 * 4 + 3  # 4 batches an epoch
    same_walk(want, got)


def test_the_caller_rng_is_untouched_without_step_rng() -> None:
    """The batches pulled ahead are fetched in this process (num_workers=0) under their own
    keys; the caller's global RNG goes on as without the look-ahead."""
    torch.manual_seed(3)
    want = walk(make(step_rng=False))
    torch.manual_seed(3)
    same_walk(want, walk(make(step_rng=False, device="cpu", device_prefetch=2)))


class Counting:
    """An iterator over range(n) that counts its next() calls."""

    def __init__(self, n: int) -> None:
        self.items, self.pulled = iter(range(n)), 0

    def __iter__(self) -> Counting:
        return self

    def __next__(self) -> int:
        self.pulled += 1
        return next(self.items)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_look_ahead_pulls_depth_batches_beyond_the_one_handed_out(depth: int) -> None:
    source = Counting(4)
    it = _device.DevicePrefetch(torch.device("cpu"), depth).wrap(source)
    assert source.pulled == 0  # nothing before the first next()
    for k in range(4):
        assert next(it) == k
        assert source.pulled == min(k + 1 + depth, 5)  # the 5th call found the end
    with pytest.raises(StopIteration):
        next(it)


def test_an_error_pulled_ahead_is_raised_at_its_own_step() -> None:
    def source() -> Iterator[int]:
        yield 0
        yield 1
        raise KeyError("step 2")

    it = _device.DevicePrefetch(torch.device("cpu"), 3).wrap(source())
    assert [next(it), next(it)] == [0, 1]  # the error was pulled with batch 0: it waits
    with pytest.raises(KeyError, match="step 2"):
        next(it)
    with pytest.raises(StopIteration):  # a generator that raised is finished
        next(it)


def drain(it: Iterator[Any], loader: seekdata.StatefulDataLoader) -> list[Any]:
    """Every step: (a batch or the error's text, the state after it)."""
    out: list[Any] = []
    while True:
        try:
            out.append((next(it), loader.state_dict()))
        except StopIteration:
            return out
        except ValueError as e:
            out.append((str(e), loader.state_dict()))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failed_batch_is_counted_and_raised_at_its_hand_out(workers: int) -> None:
    def bad(**kw: Any) -> seekdata.StatefulDataLoader:
        return seekdata.StatefulDataLoader(
            Noisy(16, bad=True), batch_size=3, seed=1, num_workers=workers, **kw
        )

    plain = bad()
    want = drain(iter(plain), plain)
    ahead = bad(device="cpu", device_prefetch=2)
    got = drain(iter(ahead), ahead)
    assert sum(isinstance(b, str) for b, _ in want) == 2
    assert [b if isinstance(b, str) else None for b, _ in got] == [
        b if isinstance(b, str) else None for b, _ in want
    ]
    same_walk(
        [(None if isinstance(b, str) else b, s) for b, s in want],
        [(None if isinstance(b, str) else b, s) for b, s in got],
    )


@pytest.mark.parametrize(
    ("kind", "workers", "depth", "resume"),
    [
        ("map", 0, 3, {"num_workers": 2, "device_prefetch": 1}),
        ("map", 2, 2, {"num_workers": 0, "device": None}),
        ("iterable", 2, 2, {"device": None}),
        ("iterable", 0, 1, {"device_prefetch": 3}),
    ],
)
def test_resume_from_a_state_taken_mid_look_ahead_is_exact(
    kind: str, workers: int, depth: int, resume: dict[str, Any]
) -> None:
    """Every stop point takes state_dict() while the look-ahead holds batches, then breaks;
    the resumed loader (with or without the option) continues the uninterrupted stream."""

    def build(**kw: Any) -> seekdata.StatefulDataLoader:
        options = {"num_workers": workers, "device": "cpu", "device_prefetch": depth, **kw}
        return make(kind, **options)

    assert assert_exact_resume(build, epochs=2, resume_kwargs=resume) == 9


def interrupted(loader: seekdata.StatefulDataLoader) -> tuple[list[Any], list[Any]]:
    """Two batches, an early break, then the same loader goes on for two more iter()s: the
    batches the caller sees, and the state after the break and after each iter()."""
    batches: list[Any] = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == 2:
            break
    states = [loader.state_dict()]
    for _ in range(2):
        batches += list(loader)
        states.append(loader.state_dict())
    return batches, states


@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_an_early_break_then_state_and_iter_are_as_without_the_look_ahead(
    kind: str, workers: int, persistent: bool
) -> None:
    kw = {"persistent_workers": persistent}
    want = interrupted(make(kind, workers, **kw))
    got = interrupted(make(kind, workers, device="cpu", device_prefetch=2, **kw))
    assert first_difference(want, got) is None, first_difference(want, got)
    if kind == "map":  # the cursor goes on from the break: the uninterrupted two epochs
        full = [b for b, _ in walk(make(kind, workers)) if b is not None]
        assert first_difference([b for b, _ in full], want[0]) is None


def test_a_state_after_a_break_resumes_a_new_loader_exactly() -> None:
    full = [b for b, _ in walk(make("iterable", 2), epochs=1) if b is not None]
    loader = make("iterable", 2, device="cpu", device_prefetch=3)
    head = []
    for batch in loader:
        head.append(batch)
        if len(head) == 2:
            break
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = make("iterable", 2)
    resumed.load_state_dict(state)
    assert first_difference([b for b, _ in full], head + list(resumed)) is None


# --- the copy path, on fake streams ---------------------------------------------------------


class FakeStream:
    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name, self.log = name, log

    def wait_event(self, event: FakeEvent) -> None:
        self.log.append(("wait", self.name, event.n))


class FakeEvent:
    def __init__(self, n: int, log: list[tuple[Any, ...]]) -> None:
        self.n, self.log = n, log

    def record(self, stream: FakeStream) -> None:
        self.log.append(("event", stream.name, self.n))


class FakeStreams:
    """CudaStreams' methods on the CPU: copies are clones; every call is logged."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.inside: str | None = None
        self.events = 0

    def new_stream(self, device: torch.device) -> FakeStream:
        return FakeStream("side", self.log)

    @contextlib.contextmanager
    def use(self, stream: FakeStream) -> Iterator[None]:
        self.inside = stream.name
        try:
            yield
        finally:
            self.inside = None

    def new_event(self) -> FakeEvent:
        self.events += 1
        return FakeEvent(self.events, self.log)

    def current(self, device: torch.device) -> FakeStream:
        return FakeStream("main", self.log)

    def copy(self, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        out = tensor.clone()
        self.log.append(("copy", self.inside, id(out)))
        return out

    def record(self, tensor: torch.Tensor, stream: FakeStream) -> None:
        self.log.append(("record", stream.name, id(tensor)))


Pair = collections.namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class Box:
    t: torch.Tensor
    name: str


def nested(samples: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
    batch = torch.utils.data.default_collate(samples)
    return {
        "pair": Pair(batch["i"], batch["x"]),
        "box": Box(batch["x"] * 2, "box"),
        "list": [batch["i"] + 1, 3],
        "tuple": (batch["x"],),
        "text": "keep",
    }


def tensors(batch: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    _device.move(batch, lambda t: found.append(t) or t)
    return found


@pytest.mark.parametrize("depth", [1, 2])
def test_each_batch_is_copied_on_the_side_stream_and_waited_for_at_hand_out(depth: int) -> None:
    want = list(make(collate_fn=nested))
    fake = FakeStreams()
    loader = make(collate_fn=nested)
    loader._engine.lookahead = _device.DevicePrefetch(torch.device("cpu"), depth, streams=fake)
    got, marks = [], []
    for batch in loader:
        got.append(batch)
        marks.append(len(fake.log))

    def plain(batch: dict[str, Any]) -> dict[str, Any]:  # first_difference reads no dataclass
        return {**batch, "box": dataclasses.astuple(batch["box"])}

    assert first_difference([plain(b) for b in want], [plain(b) for b in got]) is None
    assert type(got[0]["pair"]) is Pair and type(got[0]["box"]) is Box
    assert got[0]["box"].name == "box"
    assert got[0]["list"][1] == 3 and got[0]["text"] == "keep"
    log = fake.log
    assert all(entry[1] == "side" for entry in log if entry[0] in ("copy", "event"))
    for k, batch in enumerate(got):
        copied = [id(t) for t in tensors(batch)]
        assert len(copied) == 5  # every tensor leaf, none shared with the engine's batch
        before = log[: marks[k]]
        wait = before.index(("wait", "main", k + 1))  # batch k's event is the (k+1)-th
        assert before.index(("event", "side", k + 1)) < wait  # recorded when copied
        recorded = {e[2] for e in before[wait:] if e[0] == "record"}
        assert set(copied) <= recorded  # marked as used on the caller's stream
        ahead = min(k + depth, len(got) - 1)  # its copy was issued before batch k's hand-out
        assert ("event", "side", ahead + 1) in before


def test_what_has_no_tensor_passes_through_without_an_event() -> None:
    fake = FakeStreams()
    failed = FailedBatch(ValueError("x"))
    items = [failed, "text", 5, {"a": "b"}]
    it = _device.DevicePrefetch(torch.device("cpu"), 1, streams=fake).wrap(iter(items))
    got = list(it)
    assert got[0] is failed and got[1:] == items[1:]
    assert fake.log == []


# --- errors ---------------------------------------------------------------------------------

FORMULA = r"StatefulDataLoader: .*must .*; got .*; pass "


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"device": 0}, TypeError, "device must be a str or torch.device"),
        ({"device": "gpu"}, ValueError, "must name a device torch knows; got device='gpu'"),
        ({"device": "meta"}, ValueError, "must be a CUDA device or 'cpu'; got device='meta'"),
        ({"device": "cpu", "device_prefetch": 0}, ValueError, "device_prefetch must be >= 1"),
        ({"device_prefetch": True}, TypeError, "device_prefetch must be an int >= 1"),
        ({"device": "cpu", "device_prefetch": 1.5}, TypeError, "must be an int >= 1"),
    ],
)
def test_a_bad_option_is_refused_naming_it(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=FORMULA) as caught:
        make(**kwargs)
    assert match in str(caught.value)


def test_cuda_without_cuda_names_the_option_and_what_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", torch.device("cuda", 0)):
        with pytest.raises(ValueError, match=FORMULA) as caught:
            make(device=device)
        text = str(caught.value)
        assert "device='cuda" in text and "torch.cuda.is_available() is False" in text
        assert "available: 'cpu'" in text and "pass device='cpu'" in text


def test_a_cuda_index_this_machine_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=FORMULA) as caught:
        _device.prefetch_option("cuda:2", 1, "StatefulDataLoader")
    assert "one of this machine's 2 CUDA device(s); got index 2" in str(caught.value)
    assert "'cuda:0', 'cuda:1'" in str(caught.value)
    option = _device.prefetch_option("cuda:1", 2, "StatefulDataLoader")
    assert option is not None and option.pins and option.depth == 2


def test_the_option_can_be_assigned_and_applies_at_the_next_iter() -> None:
    want = [b for b, _ in walk(make(), epochs=1) if b is not None]
    loader = make()
    assert loader.device is None and loader.device_prefetch == 1
    with pytest.raises(ValueError, match="device_prefetch must be >= 1"):
        loader.device_prefetch = 0
    assert loader.device_prefetch == 1 and loader._engine.lookahead is None
    loader.device = "cpu"
    loader.device_prefetch = 2
    assert loader.device == torch.device("cpu")
    assert loader._engine.lookahead is not None and loader._engine.lookahead.depth == 2
    torch.manual_seed(0)
    got = [b for b, _ in walk(loader, epochs=1) if b is not None]
    assert first_difference([b for b, _ in want], [b for b, _ in got]) is None
    loader.device = None
    assert loader._engine.lookahead is None


def test_a_failed_copy_is_raised_at_its_own_step() -> None:
    class Failing(FakeStreams):
        def copy(self, tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
            if int(tensor.flatten()[0]) == 2:
                raise RuntimeError("CUDA out of memory (fake)")
            return super().copy(tensor, device)

    batches = [torch.full((2,), float(k)) for k in range(4)]
    option = _device.DevicePrefetch(torch.device("cpu"), 2, streams=Failing())
    it = option.wrap(iter(batches))
    assert [float(next(it)[0]), float(next(it)[0])] == [0.0, 1.0]  # pulled with the error
    with pytest.raises(RuntimeError, match="out of memory"):
        next(it)
    assert float(next(it)[0]) == 3.0  # the next next() goes on, as torch's iterator does


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_cuda_implies_pinned_batches_in_the_engine(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    loader = make(kind, device="cuda")  # built, never iterated: no CUDA here
    engine = loader._engine.loader if kind == "map" else loader._engine.engine
    assert engine.pin_memory is True and loader.pin_memory is False
    assert loader.device == torch.device("cuda") and loader.device_prefetch == 1
    assert make(kind, device="cpu")._engine.lookahead is not None
    cpu = make(kind, device="cpu")
    assert (cpu._engine.loader if kind == "map" else cpu._engine.engine).pin_memory is False


@pytest.mark.parametrize(
    "argv",
    [
        ["tests/gpu_device_prefetch_check.py", "--device", "cpu"],
        ["benchmarks/device_prefetch.py", "--device", "cpu", "--quick", "--out", "{tmp}/d.json"],
    ],
)
def test_the_gpu_check_and_the_benchmark_run_as_a_dry_run_on_the_cpu(
    argv: list[str], tmp_path: pathlib.Path
) -> None:
    """Both need CUDA for their point; ``--device cpu`` runs their code here so they do not rot
    before a GPU session runs them."""
    root = ROOT
    src = str(pathlib.Path(seekdata.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(root / args[0]), *args[1:]],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if "benchmarks" in args[0]:
        rows = json.loads((tmp_path / "d.json").read_text())["rows"]
        assert {"device=, device_prefetch=1", "already on the device"} <= {r["case"] for r in rows}
    else:
        assert json.loads(done.stdout)["resume"]["losses_equal"] is True


def test_torchs_iterator_attributes_still_reach_through() -> None:
    it = iter(make(num_workers=2, device="cpu", device_prefetch=2))
    next(it)
    assert len(it._workers) == 2  # tests and tools reach for the workers, as with torch
