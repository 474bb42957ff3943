"""What a plain ``pickle.dump`` file would import, found without executing any of it.

:mod:`pickletools` parses a pickle's opcodes and runs none of them, so ``seekdata inspect`` can
tell a plain pickle (which it refuses unread) from a damaged file, and name the classes and
functions that unpickling it would import.
"""

from __future__ import annotations

import pickle
import pickletools

# torch.save's legacy (non-zip) format starts by pickling this number: PROTO 2, LONG1 10 bytes
_TORCH_LEGACY = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_PICKLE_OPCODES = 4  # opcodes that must parse before a file counts as a pickle stream
_PICKLE_SCAN = 1 << 24  # bytes of a plain pickle scanned for the names it imports


def is_legacy_torch(path: str) -> bool:
    """Whether ``path`` is a ``torch.save`` file in the legacy (non-zip) format."""
    with open(path, "rb") as f:
        return f.read(len(_TORCH_LEGACY)) == _TORCH_LEGACY


def plain_pickle_globals(path: str) -> list[str] | None:
    """The names a plain ``pickle.dump`` file would import, read with :mod:`pickletools`
    (which parses opcodes and executes nothing); None when the file is not a pickle stream."""
    with open(path, "rb") as f:
        data = f.read(_PICKLE_SCAN)
    if len(data) < 2 or data[0] != pickle.PROTO[0] or not 2 <= data[1] <= pickle.HIGHEST_PROTOCOL:
        return None
    if data.startswith(_TORCH_LEGACY):
        return None  # torch.load reads it, with weights_only
    names: list[str] = []
    strings: list[str] = []
    parsed = 0
    try:
        for opcode, arg, _ in pickletools.genops(data):
            parsed += 1
            if opcode.name in ("GLOBAL", "INST"):
                names.append(str(arg).replace(" ", "."))
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(".".join(strings[-2:]))
            elif isinstance(arg, str):
                strings.append(arg)
    except ValueError:  # damaged, or cut at _PICKLE_SCAN: a pickle if it began like one
        if parsed < _PICKLE_OPCODES:
            return None
    return list(dict.fromkeys(names))
