"""Reading a checkpoint file for ``seekdata inspect`` (:mod:`seekdata.tools.inspection`):
JSON, a ``torch.save`` file or a :mod:`seekdata.checkpoint` file (its checksum verified),
without running code from it; every failure is a ``ValueError`` that names the file and says
what to do.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
import zipfile
from collections.abc import Sequence
from typing import Any

from seekdata.checkpoint import pickles as _pickles

_FOOTER_MARK = b"seekdata-checkpoint/"  # seekdata.checkpoint.save's footer starts so
_TAIL = 160  # bytes at the end of a file that hold such a footer
_MAX_KEYS = 20  # keys listed in an error message


def some(keys: Sequence[Any]) -> str:
    """Up to 20 of ``keys`` for an error message, and how many more there are."""
    shown = ", ".join(repr(k) for k in list(keys)[:_MAX_KEYS])
    more = len(keys) - _MAX_KEYS
    return shown + (f", … ({more} more)" if more > 0 else "") if keys else "none"


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """Load ``path`` without running code from it; returns (object, format description).

    Raises ``ValueError`` naming the file when it is corrupt, truncated, or holds pickled
    objects that ``torch.load(weights_only=True)`` refuses; ``OSError`` when unreadable.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(64)
        size = os.fstat(f.fileno()).st_size
        f.seek(max(size - _TAIL, 0))
        tail = f.read()
    if path.lower().endswith(".json") or head.lstrip()[:1] in (b"{", b"["):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f), "JSON"
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"{path} must be valid JSON (it is named .json or starts like JSON); it is not: "
                f"{exc}; the file is truncated or corrupt: inspect an earlier copy"
            ) from exc
        except RecursionError:
            raise ValueError(too_deep(path, "JSON")) from None
    kind = "torch.save file, no checksum"
    if _FOOTER_MARK in tail:
        from seekdata import checkpoint

        checkpoint.verify(path)  # CheckpointCorruptError (a ValueError) names the file
        kind = "seekdata.checkpoint file, checksum verified"
    return _torch_load(path, size), kind


def _torch_load(path: str, size: int) -> Any:
    import torch

    if size == 0:
        raise ValueError(
            f"{path} must be a torch.save checkpoint or a JSON file; it is empty (0 bytes); "
            f"the write was interrupted: inspect an earlier checkpoint"
        )
    mmap = zipfile.is_zipfile(path)  # tensors are mapped, not read: cheap on huge files
    if not mmap:
        raw = _pickles.plain_pickle_globals(path)
        if raw is not None:  # refused before torch.load, which would only fail on it
            raise ValueError(_plain_pickle_message(path, raw))
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        names = _unsafe_globals(path, exc)
        message = _pickled_message(path, names) if names else _corrupt_message(path, exc)
        raise ValueError(message) from exc
    except OSError:
        raise
    except RecursionError:
        raise ValueError(too_deep(path, "torch.save")) from None
    except Exception as exc:  # torch.load reports damage as RuntimeError, KeyError, EOFError…
        raise ValueError(_corrupt_message(path, exc)) from exc


def too_deep(path: str, kind: str) -> str:
    return (
        f"{path} must nest its {kind} data less deeply than Python's recursion limit "
        f"({sys.getrecursionlimit()}) to be read; it nests deeper (RecursionError); seekdata "
        f"states are a few levels deep: save them nearer the top of the file"
    )


def _unsafe_globals(path: str, exc: Exception) -> list[str]:
    """The classes and functions a pickle would have to import (what weights_only refused)."""
    import torch

    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # an older torch or a legacy-format file: take them from the error
        found = (m.group(1) or m.group(2) for m in _REFUSED.finditer(str(exc)))
        return list(dict.fromkeys(found))


# how torch's weights_only unpickler names what it refused: a global it does not allow, one
# from a module it blocks (os, subprocess…), or an object of a class it may not build
_REFUSED = re.compile(
    r"GLOBAL (\S+) (?:was not an allowed global|whose module \S+ is blocked)"
    r"|but got <class '([^']+)'>"
)


def _plain_pickle_message(path: str, names: list[str]) -> str:
    imports = f", importing {some(names)}" if names else ""
    return (
        f"{path} must be a torch.save checkpoint or a JSON file to be inspected; it is a plain "
        f"pickle (pickle.dump{imports}), refused unread: unpickling it could run code from the "
        f"file, and seekdata will not; if you trust the file, load it with pickle.load and "
        f"json.dump the states you want to inspect, or save with torch.save"
    )


def _pickled_message(path: str, names: list[str]) -> str:
    return (
        f"{path} must hold only tensors and plain containers (dict, list, int, str…) to be "
        f"inspected; it contains pickled objects ({some(names)}) whose loading would run their "
        f"code, so it is refused unread: seekdata will not execute them; save seekdata states "
        f"as the plain dicts state_dict() returns, or, if you trust the file, load it with "
        f"torch.load(weights_only=False) and json.dump the states you want to inspect"
    )


def _corrupt_message(path: str, exc: Exception) -> str:
    lines = str(exc).splitlines()
    detail = [line.strip() for line in lines if "WeightsUnpickler error:" in line]
    reason = (detail or lines or [type(exc).__name__])[0]
    return (
        f"{path} must be a torch.save checkpoint or a JSON file; torch.load cannot read it "
        f"({type(exc).__name__}: {reason}); the file is truncated or corrupt: inspect an "
        f"earlier checkpoint"
    )
