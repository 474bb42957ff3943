"""``seekdata inspect``: show the seekdata states inside a checkpoint file, for a person.

Reading never runs code from the file: a ``.json`` file (or one whose first byte is ``{`` or
``[``) is parsed as JSON; anything else is read with ``torch.load(weights_only=True)``, which
refuses pickled objects; a file written by :func:`seekdata.checkpoint.save` has its checksum
footer verified first. States are found wherever they are nested in dicts, lists and tuples:
a state is a mapping with an int ``"seekdata"`` version and a ``"kind"``.

Key paths
---------
A path names a place in the file by its keys and list indices, separated by ``.`` or ``/``:
``loader``, ``state/loader``, ``trainer.loaders.0``. In a dict the longest run of segments
that is a key wins, so keys that themselves hold dots (``"module.loader"``) are reachable;
in a list or tuple a segment is an index. The file's root is ``<root>``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from seekdata._core import state as _state
from seekdata.sources.mixtures import records as _records
from seekdata.tools import _command
from seekdata.tools._readckpt import read_checkpoint, some, too_deep

__all__ = ["add_parser", "find_states", "fingerprint", "main", "read_checkpoint", "run"]

#: Stream-defining fields of every state, then the extra ones of a loader state.
STREAM_FIELDS = (_state.K_N, _state.K_SEED, _state.K_ORDER, _state.K_SHUFFLE, _state.K_DROP_LAST)
LOADER_STREAM_FIELDS = (_state.K_BATCH_SIZE, _state.K_BATCH_DROP_LAST, _state.K_SAMPLE_SEED)

ROOT = "<root>"
_FOOTER_MARK = b"seekdata-checkpoint/"  # seekdata.checkpoint.save's footer starts so
_TAIL = 160  # bytes at the end of a file that hold such a footer

Key = str | int


def fingerprint(state: Mapping[str, Any]) -> str:
    """A short hash of the fields that define ``state``'s stream (12 hex digits).

    Two states with the same fingerprint continue the same sample stream: n, seed, order,
    shuffle, drop_last, and for a loader batch_size, batch_drop_last, sample_seed and, over a
    Mixture, its ``dataset`` signature. The cursor (epoch, position, step) and world size are
    left out.
    """
    if not isinstance(state, Mapping):
        raise TypeError(
            f"fingerprint: state must be a dict from state_dict(); got {type(state).__name__}; "
            f"pass the seekdata state itself"
        )
    fields = STREAM_FIELDS + (LOADER_STREAM_FIELDS if state.get(_state.K_KIND) == "loader" else ())
    chosen = {key: state.get(key) for key in fields}
    if (
        _state.K_DATASET in state
    ):  # the dataset's signature: only where present (older digests hold)
        chosen[_state.K_DATASET] = state[_state.K_DATASET]
    canonical = json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def is_state(obj: Any) -> bool:
    """Whether ``obj`` looks like a seekdata state (an int version marker and a kind)."""
    if not isinstance(obj, Mapping) or _state.K_VERSION not in obj or _state.K_KIND not in obj:
        return False
    version = obj[_state.K_VERSION]
    return isinstance(version, int) and not isinstance(version, bool)


def find_states(obj: Any, keys: tuple[Key, ...] = ()) -> Iterator[tuple[tuple[Key, ...], Any]]:
    """Every seekdata state inside ``obj`` (dicts, lists, tuples), as (key path, state), in
    depth-first order. Iterative, so that no nesting depth can exhaust Python's stack."""
    seen: set[int] = set()
    stack: list[Iterator[tuple[Key, Any]]] = [iter([(None, obj)])]  # type: ignore[list-item]
    paths: list[tuple[Key, ...]] = [keys[:-1] if keys else ()]
    first = True
    while stack:
        try:
            key, node = next(stack[-1])
        except StopIteration:
            stack.pop()
            paths.pop()
            continue
        path = keys if first else (*paths[-1], key)
        first = False
        if is_state(node):
            yield path, node
            continue
        if not isinstance(node, Mapping | list | tuple) or id(node) in seen:
            continue  # an unpickled container may hold itself
        seen.add(id(node))
        if isinstance(node, Mapping):
            items = ((k if isinstance(k, int | str) else str(k), v) for k, v in node.items())
            stack.append(items)
        else:
            stack.append(iter(enumerate(node)))
        paths.append(path)


def path_text(keys: Sequence[Key]) -> str:
    """A key path as ``--key`` takes it."""
    return ".".join(str(key) for key in keys) if keys else ROOT


def resolve(obj: Any, path: str) -> tuple[Any, tuple[Key, ...]]:
    """The object ``path`` names in ``obj`` (see the module docstring), and its key path."""
    if path.strip() in ("", ROOT):
        return obj, ()
    spans = [m.span() for m in re.finditer(r"[^./]+", path)]
    if not spans:
        raise ValueError(f"--key must name a key such as 'loader'; got {path!r}")
    node, i = obj, 0
    keys: tuple[Key, ...] = ()
    while i < len(spans):
        here = path_text(keys)
        if isinstance(node, Mapping):
            names = {str(k): k for k in node}
            for j in range(len(spans), i, -1):
                text = path[spans[i][0] : spans[j - 1][1]]
                if text in names:
                    key = names[text]
                    node, keys, i = node[key], (*keys, key), j
                    break
            else:
                segment = path[slice(*spans[i])]
                listed = f" (its keys: {some(list(node))})" if keys else ""
                raise ValueError(
                    f"--key {path!r} must name keys that exist; {here} has no key {segment!r}"
                    f"{listed}"
                )
        elif isinstance(node, list | tuple):
            segment = path[slice(*spans[i])]
            if not re.fullmatch(r"-?[0-9]+", segment) or not -len(node) <= int(segment) < len(node):
                raise ValueError(
                    f"--key {path!r}: {here} is a {type(node).__name__} of {len(node)} items, "
                    f"so the segment after it must be an index 0..{len(node) - 1}; got {segment!r}"
                )
            index = int(segment) % len(node)
            node, keys, i = node[index], (*keys, index), i + 1
        else:
            raise ValueError(
                f"--key {path!r}: {here} is a {type(node).__name__}, not a dict, list or "
                f"tuple, so it has no {path[slice(*spans[i])]!r}; pass a shorter path"
            )
    return node, keys


# --- showing --------------------------------------------------------------------------------


def describe(keys: Sequence[Key], state: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-native summary ``--json`` prints for one state. A state of an earlier format
    is shown as this release reads it (:func:`seekdata._core.state.upgrade`), with the version
    it was written in."""
    version = state.get(_state.K_VERSION)
    state = _state.upgrade(state)
    kind = state.get(_state.K_KIND)
    position, n = state.get(_state.K_POSITION), state.get(_state.K_N)
    unit = state.get(_state.K_UNIT, _state.UNITS[0])
    finished, percent = False, None
    if isinstance(position, int) and isinstance(n, int) and n > 0:
        # a count of batches may pass n (a sampler drawing with replacement): its epoch ended
        # when its iterator did, and the position was then recorded as n
        samples = unit == _state.UNITS[0]
        finished = position >= n if samples else state.get(_state.K_EXHAUSTED) is True
        if finished or samples:  # a count of batches has no percent of n
            percent = round(100 * position / n, 2)
    fields = STREAM_FIELDS + (LOADER_STREAM_FIELDS if kind == "loader" else ())
    try:
        _state.check_state(state, {}, where=path_text(keys))
        problem = None
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    return {
        "path": path_text(keys),
        "keys": list(keys),
        "kind": kind,
        "version": version,
        "epoch": state.get(_state.K_EPOCH),
        "position": position,
        "n": n,
        # an ended epoch's position is n whatever the unit
        "position_counts": _state.UNITS[0] if finished else unit,
        "percent": percent,
        "epoch_finished": finished,
        "exhausted": state.get(_state.K_EXHAUSTED),
        "step": state.get(_state.K_STEP),
        "batch_size": state.get(_state.K_BATCH_SIZE),
        "world_size": state.get(_state.K_WORLD_SIZE),
        "fingerprint": fingerprint(state),
        "stream": {key: state.get(key) for key in fields},
        "grown": state.get(_state.K_GROWN, []),
        "problem": problem,
        # the dataset's signature and the records it keeps of its stream (a Mixture's changes
        # and its sources' signatures): verbatim
        **{key: state[key] for key in (_state.K_DATASET, _state.K_SOURCE) if key in state},
    }


def _position_line(d: dict[str, Any]) -> str:
    if d["epoch_finished"]:
        done = "iterator exhausted" if d["exhausted"] else "iterator not yet exhausted"
        return f"{d['position']} of {d['n']} (100%, epoch finished; {done})"
    if d["position_counts"] == "batches":
        return f"{d['position']} batches (the sampler is replayed: the position counts batches)"
    if d["percent"] is None:
        return f"{d['position']} of {d['n']}"
    return f"{d['position']} of {d['n']} ({d['percent']:.1f}% of the epoch)"


def format_state(d: dict[str, Any]) -> str:
    """The human-readable block for one :func:`describe` summary."""
    stream = " ".join(f"{k}={v!r}" for k, v in d["stream"].items())
    rows = [
        ("kind", f"{d['kind']}, format version {d['version']}"),
        ("epoch", d["epoch"]),
        ("position", _position_line(d)),
    ]
    if d["kind"] == "loader":
        rows += [("step", f"{d['step']} in the epoch (batch size {d['batch_size']})")]
    rows += [("world size", d["world_size"]), ("fingerprint", f"{d['fingerprint']}  ({stream})")]
    for g in d["grown"] if isinstance(d["grown"], list) else ():
        if isinstance(g, list) and len(g) == 3:  # declare it for an earlier checkpoint
            rows.append(("grew", f"from {g[2]} items at epoch {g[0]}, position {g[1]}  "
                         f"(seekdata.Growth({g[0]}, {g[1]}, {g[2]}))"))  # fmt: skip
    records = d.get(_state.K_SOURCE)
    records = records if isinstance(records, Mapping) else {}
    signed = records.get(_state.K_SOURCES)
    if isinstance(signed, list) and signed:
        rows.append(("sources", _sources_text(signed)))
    if _state.K_DATASET in d:  # a Mixture's signature, or another dataset's (a token corpus)
        kind = _state.record_kind(d[_state.K_DATASET], None)
        rows.append(("mixture" if kind == "Mixture" else "dataset", d[_state.K_DATASET]))
    if records.get(_state.R_KIND) == "Mixture":
        history = records.get(_records.K_HISTORY)
        if isinstance(history, list) and history:
            rows.append(("history", _history_text(history)))
    if d["problem"]:
        rows.append(("problem", d["problem"]))
    return "\n".join([d["path"], *(f"  {name + ':':<13}{value}" for name, value in rows)])


def _sources_text(signed: list[Any]) -> str:
    """A dataset's sources with streams of their own (``[id, length, signature]``), one a line:
    what a resume checks each of them against."""
    lines = [
        f"id {e[0]}: first {e[1]:,} items, {e[2]}" if isinstance(e, list) and len(e) == 3
        and isinstance(e[1], int) else repr(e)
        for e in signed
    ]  # fmt: skip
    return f"\n{'':15}".join(lines)


def _history_text(history: list[Any]) -> str:
    """A mixture's changes, one a line, and the calls that rebuild it (docs/mixtures.md)."""
    records = [r for r in history if isinstance(r, Mapping)]
    ats = [f"P={r['at']:,}" if isinstance(r.get("at"), int) else "P=?" for r in records]
    wheres = [f"(epoch {r.get('epoch')}, {r.get('position')})" for r in records]
    wide = (max(map(len, ats)), max(map(len, wheres)))
    describe_change = _records.describe_change
    lines = [
        f"{at:<{wide[0]}}  {where:<{wide[1]}}  {describe_change(r)}  {str(r.get('digest'))[:8]}"
        for at, where, r in zip(ats, wheres, records, strict=True)
    ]
    calls = ".".join(f"changed({r['at']:_}, ...)" for r in records if isinstance(r.get("at"), int))
    lines.append(f"to resume: mix.{calls}, or an equal schedule= (docs/mixtures.md)")
    return f"\n{'':15}".join(lines)


# --- the command ----------------------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    """Register ``inspect`` on the ``seekdata`` command's subparsers."""
    parser = subparsers.add_parser(
        "inspect",
        help="show the seekdata states in a checkpoint file",
        description=(
            "Show every seekdata state in a checkpoint (torch.save, seekdata.checkpoint.save or "
            "JSON), wherever it is nested: epoch, position and percent of the epoch, step, "
            "batch size, world size and the stream's fingerprint. Never unpickles objects. "
            "Exit 0, 1 when the file holds no state, 2 on errors."
        ),
    )
    _arguments(parser)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="the checkpoint file")
    parser.add_argument(
        "--key",
        metavar="PATH",
        help="only look under this place: keys and list indices separated by '.' or '/', "
        "e.g. 'loader', 'state/loader', 'trainer.loaders.0'",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``seekdata inspect``: 0 when states were shown, 1 when the file holds none."""
    path = args.checkpoint
    obj, kind = read_checkpoint(path)
    try:
        node, keys = resolve(obj, args.key) if args.key is not None else (obj, ())
    except ValueError as exc:
        top = f"; top-level keys of {path}: {some(list(obj))}" if isinstance(obj, Mapping) else ""
        found = ", ".join(path_text(k) for k, _ in find_states(obj)) or "none"
        raise ValueError(
            f"{exc}{top}; seekdata states in the file: {found}; pass a path to one of them"
        ) from None
    try:  # a state's own fields may nest without limit too
        states = [describe(k, s) for k, s in find_states(node, keys)]
        text = json.dumps(
            {"file": str(path), "format": kind, "states": states}, indent=2, default=repr
        )
    except RecursionError:
        raise ValueError(too_deep(path, "state")) from None
    if args.json:
        print(text)
    elif states:
        print(f"{path} ({kind}): {len(states)} seekdata state{'s' * (len(states) != 1)}")
        for d in states:
            print()
            print(format_state(d))
    else:
        under = f" under {path_text(keys)}" if keys else ""
        print(
            f"{path} ({kind}): no seekdata state{under}; a state is a dict with an int "
            f"'seekdata' version and a 'kind', as state_dict() returns it"
        )
    return 0 if states else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m seekdata.tools.inspection ...``: the same as ``seekdata inspect ...``."""
    return _command.main_of("inspect", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
