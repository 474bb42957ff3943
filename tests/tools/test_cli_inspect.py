"""`seekdata inspect`: finds and shows the states in a checkpoint; exit 0, 1 (none) or 2."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import pickle
import sys

import pytest
import torch

import seekdata
import seekdata.state
from seekdata import checkpoint
from seekdata.tools import inspection


class Opaque:
    """Unpickling it would run code: weights_only refuses it."""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="seekdata")
    inspection.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["inspect", *argv])


def inspect(*argv: str) -> int:
    """As the seekdata command runs it, once cli.py registers add_parser."""
    args = parse(*argv)
    return int(args.run(args))


def states() -> tuple[dict, dict]:
    """A loader 3 batches into epoch 0 of 23 samples; a sampler at its epoch's end."""
    data = [torch.tensor(i) for i in range(23)]
    loader = seekdata.StatefulDataLoader(data, batch_size=4, shuffle=True, seed=3)
    it = iter(loader)
    for _ in range(3):
        next(it)
    sampler = seekdata.DistributedSampler(data, 1, 0, seed=5)
    it = iter(sampler)
    for _ in range(23):
        next(it)
    return loader.state_dict(), sampler.state_dict()


@pytest.fixture
def ckpt(tmp_path: pathlib.Path) -> pathlib.Path:
    loader, sampler = states()
    path = tmp_path / "ckpt.pt"
    obj = {
        "model": {"w": torch.ones(2, 2), "b": torch.zeros(2)},
        "loader": loader,
        "nested": [{"sampler": sampler}],
    }
    torch.save(obj, path)
    return path


def test_inspect_shows_every_state_for_a_person(
    ckpt: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert inspect(str(ckpt)) == 0
    out = capsys.readouterr().out
    loader, sampler = states()
    assert out.startswith(f"{ckpt} (torch.save file, no checksum): 2 seekdata states\n")
    loader_block, sampler_block = out.split("\n\n")[1:]
    assert loader_block.splitlines() == [
        "loader",
        f"  kind:        loader, format version {seekdata.state.VERSION}",
        "  epoch:       0",
        "  position:    12 of 23 (52.2% of the epoch)",
        "  step:        3 in the epoch (batch size 4)",
        "  world size:  1",
        f"  fingerprint: {inspection.fingerprint(loader)}  (n=23 seed=3 order='feistel' "
        "shuffle=True drop_last=False batch_size=4 batch_drop_last=False sample_seed=3)",
    ]
    assert sampler_block.splitlines()[0] == "nested.0.sampler"
    assert "  position:    23 of 23 (100%, epoch finished; iterator not yet exhausted)" in out
    assert f"  fingerprint: {inspection.fingerprint(sampler)}  (n=23 seed=5" in out


def test_fingerprint_depends_on_the_stream_only() -> None:
    loader, sampler = states()
    pinned = {"seekdata": 1, "kind": "sampler", "n": 10, "seed": 0, "order": "feistel"}
    pinned |= {"shuffle": True, "drop_last": False, "epoch": 0, "position": 0}
    canonical = b'{"drop_last":false,"n":10,"order":"feistel","seed":0,"shuffle":true}'
    assert hashlib.sha256(canonical).hexdigest()[:12] == "bea5650844e1"
    assert inspection.fingerprint(pinned) == "bea5650844e1"  # a format change is deliberate
    moved = {**loader, "epoch": 7, "position": 20, "step": 5, "world_size": 8}
    assert inspection.fingerprint(moved) == inspection.fingerprint(loader)
    assert inspection.fingerprint(json.loads(json.dumps(loader))) == inspection.fingerprint(loader)
    for key, value in [("seed", 4), ("n", 24), ("batch_size", 8), ("sample_seed", 0)]:
        assert inspection.fingerprint({**loader, key: value}) != inspection.fingerprint(loader)
    assert inspection.fingerprint({**sampler, "batch_size": 8}) == inspection.fingerprint(sampler)
    with pytest.raises(TypeError, match="must be a dict"):
        inspection.fingerprint([1, 2])  # type: ignore[arg-type]


def test_key_selects_a_place_in_the_file(
    ckpt: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("nested/0", "nested.0.sampler", "nested", "nested/0/sampler"):
        assert inspect(str(ckpt), "--key", key) == 0
        out = capsys.readouterr().out
        assert ": 1 seekdata state\n" in out and "\nnested.0.sampler\n" in out, key
    assert inspect(str(ckpt), "--key", "loader") == 0
    assert "\nloader\n" in capsys.readouterr().out
    assert inspect(str(ckpt), "--key", "model") == 1  # a place without a state
    assert "no seekdata state under model" in capsys.readouterr().out


def test_key_with_dots_in_its_name(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]):
    loader, _ = states()
    path = tmp_path / "dotted.pt"
    torch.save({"module.loader": loader, "module": {"other": 1}}, path)
    assert inspect(str(path), "--key", "module.loader") == 0
    assert "\nmodule.loader\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("loadr", "<root> has no key 'loadr'"),
        ("nested.3", "nested is a list of 1 items, so the segment after it must be an index 0..0"),
        ("model.w.x", "model.w is a Tensor, not a dict, list or tuple"),
        ("nested.0.samplr", "nested.0 has no key 'samplr' (its keys: 'sampler')"),
    ],
)
def test_a_bad_key_lists_what_is_there(
    ckpt: pathlib.Path, capsys: pytest.CaptureFixture[str], key: str, message: str
) -> None:
    with pytest.raises(ValueError, match="top-level keys") as info:
        inspect(str(ckpt), "--key", key)
    assert message in str(info.value)
    assert "'model', 'loader', 'nested'" in str(info.value)
    assert "seekdata states in the file: loader, nested.0.sampler" in str(info.value)
    assert inspection.main([str(ckpt), "--key", key]) == 2
    assert capsys.readouterr().err.startswith("seekdata inspect: error: --key")


def test_json_output(ckpt: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert inspect(str(ckpt), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    loader, _ = states()
    assert report["file"] == str(ckpt) and report["format"] == "torch.save file, no checksum"
    first, second = report["states"]
    assert first["path"] == "loader" and first["keys"] == ["loader"]
    assert (first["kind"], first["epoch"], first["position"], first["n"]) == ("loader", 0, 12, 23)
    assert (first["percent"], first["epoch_finished"], first["step"]) == (52.17, False, 3)
    assert (first["batch_size"], first["world_size"], first["version"]) == (
        4,
        1,
        seekdata.state.VERSION,
    )
    assert first["fingerprint"] == inspection.fingerprint(loader)
    assert first["stream"]["sample_seed"] == 3 and first["problem"] is None
    assert second["keys"] == ["nested", 0, "sampler"]
    assert (second["percent"], second["epoch_finished"], second["exhausted"]) == (
        100.0,
        True,
        False,
    )
    assert second["step"] is None and "batch_size" not in second["stream"]


def test_json_file_and_exhausted_iterator(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sampler = seekdata.DistributedSampler(list(range(6)), 1, 0, seed=2)
    assert len(list(sampler)) == 6  # the iterator finished
    path = tmp_path / "state.json"
    path.write_text(json.dumps(sampler.state_dict()))
    assert inspect(str(path)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path} (JSON): 1 seekdata state\n\n<root>\n")
    assert "6 of 6 (100%, epoch finished; iterator exhausted)" in out
    sniffed = tmp_path / "state.ckpt"  # no .json suffix: recognised by its first byte
    sniffed.write_text(json.dumps({"data": [sampler.state_dict()]}))
    assert inspect(str(sniffed), "--json") == 0
    assert json.loads(capsys.readouterr().out)["states"][0]["path"] == "data.0"


def test_a_checksummed_checkpoint_is_verified(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loader, _ = states()
    path = checkpoint.save({"loader": loader, "w": torch.arange(1000.0)}, tmp_path / "c.pt")
    assert inspect(str(path)) == 0
    assert "(seekdata.checkpoint file, checksum verified): 1 seekdata state" in (
        capsys.readouterr().out
    )
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte: torch.load might not notice
    path.write_bytes(bytes(data))
    assert inspection.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "sha256" in err


def test_no_state_exits_1(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.pt"
    torch.save({"model": {"w": torch.ones(2)}, "step": 4, "seekdata": "not a version"}, path)
    assert inspection.main([str(path)]) == 1
    assert "no seekdata state" in capsys.readouterr().out
    assert inspection.main([str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["states"] == []


class Touches:
    """Unpickling it would run ``os.system``, a function of a module torch blocks outright."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("kind", ["class", "blocked function"])
def test_pickled_objects_are_not_executed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], legacy: bool, kind: str
) -> None:
    """In either torch.save format (the legacy one: _use_new_zipfile_serialization=False)."""
    path, marker = tmp_path / "pickled.pt", tmp_path / "ran"
    obj = Opaque() if kind == "class" else Touches(marker)
    torch.save({"loader": states()[0], "obj": obj}, path, _use_new_zipfile_serialization=not legacy)
    assert inspection.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seekdata inspect: error: {path} must hold only tensors")
    assert "refused unread: seekdata will not execute them" in err
    assert ("Opaque" if kind == "class" else "system") in err
    assert "corrupt" not in err and not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "bad json"])
def test_a_corrupt_file_is_named_and_exits_2(
    ckpt: pathlib.Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    data = ckpt.read_bytes()
    bad = ckpt.with_name("bad.json" if damage == "bad json" else "bad.pt")
    bad.write_bytes(
        {
            "truncated": data[: len(data) // 2],
            "garbage": b"\x80\x02not a checkpoint at all",
            "empty": b"",
            "bad json": b'{"seekdata": 1, "kind": "lo',
        }[damage]
    )
    assert inspection.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seekdata inspect: error: {bad} must be")
    assert "corrupt" in err or "interrupted" in err


def test_missing_file_exits_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert inspection.main([str(tmp_path / "nope.pt")]) == 2
    assert "nope.pt" in capsys.readouterr().err


def test_add_parser_registers_inspect() -> None:
    args = parse("x.pt", "--key", "a/b", "--json")
    assert (args.command, args.checkpoint, args.key, args.json) == ("inspect", "x.pt", "a/b", True)
    assert args.run is inspection.run


@pytest.mark.parametrize("content", ["object", "plain data"])
def test_a_plain_pickle_is_named_and_refused_unread(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    path = tmp_path / "state.pkl"
    obj = {"loader": states()[0], **({"obj": Opaque()} if content == "object" else {})}
    path.write_bytes(pickle.dumps(obj, protocol=4))
    assert inspection.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seekdata inspect: error: {path} must be a torch.save checkpoint")
    assert "it is a plain pickle (pickle.dump" in err and "refused unread" in err
    assert ("Opaque" in err) == (content == "object")
    assert "corrupt" not in err and "Traceback" not in err


def test_deeply_nested_json_is_a_clear_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert inspection.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seekdata inspect: error: {path} must nest its JSON data less deeply")
    assert "RecursionError" in err and "Traceback" not in err


def test_a_state_below_any_recursion_limit_is_found(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    depth = 3 * sys.getrecursionlimit()
    node: object = {"loader": states()[0]}
    for _ in range(depth):
        node = [node]
    path = tmp_path / "deep.pt"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10 * depth)  # pickling nests as deep as the object
    try:
        torch.save(node, path)
    finally:
        sys.setrecursionlimit(limit)
    assert inspection.main([str(path), "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["states"]
    assert found["keys"] == [0] * depth + ["loader"] and found["kind"] == "loader"


def test_a_state_whose_fields_nest_without_limit_is_a_clear_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep: object = []
    for _ in range(3 * sys.getrecursionlimit()):
        deep = [deep]
    loader = {**states()[0], "seed": deep}
    path = tmp_path / "deep-field.pt"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10 * limit)
    try:
        torch.save({"loader": loader}, path)
    finally:
        sys.setrecursionlimit(limit)
    assert inspection.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seekdata inspect: error: {path} must nest its state data less deeply")


def test_a_changed_mixture_shows_its_history(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state over a mixture that changed: one line per change (where, what, digest), the
    calls that rebuild it; --json carries the state's records (history, prefix) verbatim."""
    web, code = range(5), range(7)
    mix = seekdata.Mixture({"web": web, "code": code}, [3, 1], length=10, seed=3).changed(
        4, {"code": 1, "books": 1}, add={"books": range(3)}, remove=["web"]
    )
    mix = mix.changed(12, [0, 1, 1], grown={"code": range(9)})
    loader = seekdata.StatefulDataLoader(mix, batch_size=2)
    loader.set_epoch(1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    path = tmp_path / "ckpt.json"
    path.write_text(json.dumps({"loader": state}))
    assert inspect(str(path)) == 0
    out = capsys.readouterr().out
    digests = [r["digest"][:8] for r in state["source"]["history"]]
    assert out.splitlines()[-4:] == [
        f"  mixture:     {mix.stream_signature}",
        f"  history:     P=4   (epoch 0, 4)  + books; - web; weights 0 1/2 1/2  {digests[0]}",
        f"               P=12  (epoch 1, 2)  code grew 7 -> 9; weights 0 1/2 1/2  {digests[1]}",
        "               to resume: mix.changed(4, ...).changed(12, ...), or an equal schedule= "
        "(docs/mixtures.md)",
    ]
    assert inspect(str(path), "--json") == 0
    report = json.loads(capsys.readouterr().out)["states"][0]
    records = report["source"]  # the mixture's records, under the key it owns
    assert records["history"] == state["source"]["history"]
    assert records["prefix"] == state["source"]["prefix"] and records == state["source"]
    assert report["dataset"] == state["dataset"] == mix.stream_signature


def test_a_token_corpus_signature_is_labelled_as_a_dataset_not_a_mixture(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    from seekdata.tokens import PackedDocuments

    tokens = np.tile(np.array([5, 6, 7, 1], dtype=np.uint16), 20)  # 20 documents, eos 1
    tokens.tofile(tmp_path / "corpus.bin")
    packed = PackedDocuments(str(tmp_path / "corpus.bin"), 8, eos_id=1)
    state = seekdata.StatefulDataLoader(packed, batch_size=2).state_dict()
    path = tmp_path / "ckpt.json"
    path.write_text(json.dumps({"loader": state}))
    assert inspect(str(path)) == 0
    out = capsys.readouterr().out
    assert f"  dataset:     {packed.stream_signature}" in out.splitlines()
    assert "mixture:" not in out


def test_a_mixture_state_of_the_first_format_shows_its_records_as_this_release_writes_them(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state an earlier release wrote (its records at the top level) is shown with the
    version it was written in, its records as this release reads them: the signed sources one
    a line, the history, and --json's ``source`` the converted records."""
    from seekdata._core.state import upgrade

    fixture = pathlib.Path(__file__).parents[1] / "sources" / "mixtures" / "states"
    fixture = fixture / "mixture_02bdffb.json"
    old = json.loads(fixture.read_text())["state"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"loader": old}))
    assert inspect(str(path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  kind:        loader, format version 1" in lines
    at = lines.index("  sources:     id 0: first 5 items, Signed(0, n=5)")
    assert lines[at + 1 : at + 4] == [
        f"{'':15}id 1: first 7 items, Signed(1, n=7)",
        f"{'':15}id 2: first 4 items, Signed(2, n=4)",
        f"{'':15}id 3: first 3 items, Signed(3, n=3)",
    ]
    assert lines[at + 4] == f"  mixture:     {old['dataset']}"
    assert lines[at + 5].startswith("  history:     P=4  (epoch 0, 4)  + maths, books; - web")
    assert not any(line.startswith("  problem:") for line in lines)
    assert inspect(str(path), "--json") == 0
    report = json.loads(capsys.readouterr().out)["states"][0]
    assert report["version"] == 1 and report["position_counts"] == "samples"
    assert report["source"] == upgrade(old)["source"]
    assert report["source"]["kind"] == "Mixture" and report["source"]["history"] == old["history"]
    assert "prefix" not in report and "history" not in report  # one place: the records
