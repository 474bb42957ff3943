"""Atomic, verified checkpoint files; step rotation; the DDP rank-0 write.

The public face is :mod:`seekdata.checkpoint`; its docstring is the user's guide to this module.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from seekdata._core import dist as _dist
from seekdata._core.checks import check_counter
from seekdata.checkpoint.files import (
    CheckpointCorruptError,
    is_corrupt,
    remove_stale_temps,
    verify_file,
    write_atomic,
)

__all__ = [
    "CheckpointCorruptError",
    "CheckpointManager",
    "load",
    "load_on_every_rank",
    "save",
    "save_on_rank0",
    "verify",
]

_T = TypeVar("_T")


def _as_path(path: Any, where: str) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"{where}: path must be a str or os.PathLike; got {type(path).__name__} {path!r}; "
            f"pass a file path such as 'ckpt/last.pt'"
        )
    return Path(path)


def save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``obj`` with ``torch.save`` to ``path`` atomically, with a checksum footer.

    Creates missing parent folders. Returns ``path`` as a ``Path``. The file also loads with
    a plain ``torch.load``; :func:`load` verifies it first. Removes temporary files that
    killed writers of ``path`` left on this host. A full disk or file-size limit raises the
    ``OSError`` (``ENOSPC``, ``EDQUOT``, ``EFBIG``) and leaves the old file in place.
    """
    path = _as_path(path, "save")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, lambda name: name == path.name)
    return write_atomic(obj, path)


def verify(path: str | os.PathLike[str]) -> None:
    """Raise :class:`CheckpointCorruptError` unless ``path``'s footer matches its bytes."""
    verify_file(_as_path(path, "verify"), "verify")


def load(
    path: str | os.PathLike[str], map_location: Any = None, *, weights_only: bool = True
) -> Any:
    """Verify ``path`` (see :func:`save`), then ``torch.load`` it.

    Raises :class:`CheckpointCorruptError` (a ``ValueError``) naming the file when it is
    truncated or corrupt, ``FileNotFoundError`` when it is missing.
    """
    path = _as_path(path, "load")
    verify_file(path, "load")
    return torch.load(path, map_location=map_location, weights_only=weights_only)


# --- DDP ------------------------------------------------------------------------------------


def _on_rank0(fn: Callable[[], _T], where: str) -> _T | None:
    """Run ``fn`` on rank 0; every rank returns after it finished, or raises if it failed."""
    if not _dist.pg_initialized():
        return fn()
    result, error = None, None
    if _dist.rank_or_zero() == 0:
        try:
            result = fn()
        except Exception as e:  # re-raised below, after the other ranks know
            error = e
    failed = _dist.any_rank(error is not None)
    if error is not None:
        raise error
    if failed:
        raise RuntimeError(
            f"{where}: rank 0 must finish writing before the ranks go on; it failed (its "
            f"traceback has the cause); every rank raises so that none waits for it"
        )
    return result


def save_on_rank0(obj: Any, path: str | os.PathLike[str]) -> Path:
    """:func:`save` on rank 0; every rank returns once the file is in place (a barrier).

    Call it on every rank. Without a process group the calling process writes.
    """
    path = _as_path(path, "save_on_rank0")
    _on_rank0(lambda: save(obj, path), "save_on_rank0")
    return path


def _local_device() -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    current = torch.cuda.current_device()
    if current != 0:  # set explicitly with torch.cuda.set_device
        return torch.device("cuda", current)
    local = _dist.local_rank()
    if local is not None and 0 <= local < torch.cuda.device_count():
        return torch.device("cuda", local)
    return torch.device("cuda", current)


def load_on_every_rank(path: str | os.PathLike[str], *, weights_only: bool = True) -> Any:
    """:func:`load` with tensors mapped to this rank's device: ``cuda:<local rank>`` (the
    device set with ``torch.cuda.set_device``, else ``LOCAL_RANK``) when CUDA is available,
    else the CPU. Every rank reads the file; it must be on a shared file system."""
    return load(path, map_location=_local_device(), weights_only=weights_only)


# --- rotation ------------------------------------------------------------------------------


class CheckpointManager:
    """Step checkpoints ``<prefix><step:010d><suffix>`` in one folder, the last K kept.

    ``save(step, obj)`` writes on rank 0 (every rank waits) and then deletes all but the
    ``keep_last`` highest steps, never the one it wrote; ``latest()`` is the path of the highest
    step, or None; ``load_latest()`` loads the newest checkpoint that verifies. Only files
    named exactly as :meth:`path` names them count: ``step_7.pt`` beside
    ``step_0000000007.pt`` is someone else's file, never listed, loaded or deleted.

    >>> manager = CheckpointManager("ckpt", keep_last=3)  # doctest: +SKIP
    >>> manager.save(step, {"model": model.state_dict(), "step": step})  # doctest: +SKIP
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep_last: int | None = None,
        prefix: str = "step_",
        suffix: str = ".pt",
    ) -> None:
        where = "CheckpointManager"
        self.directory = _as_path(directory, where)
        if keep_last is not None and check_counter(keep_last, "keep_last", where) < 1:
            raise ValueError(
                f"{where}: keep_last must be None (keep all) or >= 1; got {keep_last}; "
                f"pass keep_last=1 to keep only the newest checkpoint"
            )
        for name, value in (("prefix", prefix), ("suffix", suffix)):
            if not isinstance(value, str) or "/" in value or os.sep in value:
                raise ValueError(
                    f"{where}: {name} must be a str without path separators; got {value!r}; "
                    f"put folders in directory instead"
                )
        self.keep_last = keep_last
        self.prefix, self.suffix = prefix, suffix
        self._name = re.compile(re.escape(prefix) + r"([0-9]+)" + re.escape(suffix) + r"\Z")

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, keep_last={self.keep_last!r})"

    def path(self, step: int) -> Path:
        """The file of ``step``."""
        step = check_counter(step, "step", "CheckpointManager.path")
        return self.directory / f"{self.prefix}{step:010d}{self.suffix}"

    def steps(self) -> list[int]:
        """Steps with a checkpoint file in the folder, ascending: files named exactly as
        :meth:`path` names them (temporary files, other spellings and folders excluded)."""
        if not self.directory.is_dir():
            return []
        found = []
        for p in self.directory.iterdir():
            m = self._name.match(p.name)
            if m is not None and self._canonical(p.name) and p.is_file():
                found.append(int(m.group(1)))
        return sorted(found)

    def _canonical(self, name: str) -> bool:
        m = self._name.match(name)
        return m is not None and name == self.path(int(m.group(1))).name

    def latest(self) -> Path | None:
        """The path of the highest step, or None when the folder has no checkpoint."""
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def save(self, step: int, obj: Any) -> Path:
        """Write ``obj`` as ``step`` (rank 0 writes, every rank waits), then rotate."""
        step = check_counter(step, "step", "CheckpointManager.save")
        _on_rank0(lambda: self._save(step, obj), "CheckpointManager.save")
        return self.path(step)

    def _save(self, step: int, obj: Any) -> None:
        where = "CheckpointManager.save"
        later = [s for s in self.steps() if s > step]
        corrupt = [s for s in later if is_corrupt(self.path(s), where)]
        if len(corrupt) < len(later):
            raise ValueError(
                f"{where}: step must be >= the latest step in {self.directory} ({later[-1]}) "
                f"so that latest() is the newest; got step {step}; delete the later "
                f"checkpoints or use another directory to branch"
            )
        for bad in corrupt:  # load_latest() skipped them; set them aside so that rotation
            moved = self.path(bad).with_name(self.path(bad).name + ".corrupt")  # cannot
            os.replace(self.path(bad), moved)  # keep them instead of the file written now
            warnings.warn(
                f"{where}: {self.path(bad)} is corrupt and newer than step {step}; renamed it "
                f"to {moved.name} so that step {step} is the latest; delete it when done",
                stacklevel=4,
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(self.directory, self._canonical)
        write_atomic(obj, self.path(step))
        if self.keep_last is not None:
            for old in self.steps()[: -self.keep_last]:
                if old < step:  # never the checkpoint just written
                    self.path(old).unlink(missing_ok=True)

    def load_latest(self, map_location: Any = None, *, weights_only: bool = True) -> Any:
        """:func:`load` the newest checkpoint that verifies; None when the folder has none.

        A newer file that is truncated or corrupt is skipped with a warning naming it (the
        next :meth:`save` sets it aside); when every file is corrupt, raises the newest one's
        :class:`CheckpointCorruptError`.
        """
        where = "CheckpointManager.load_latest"
        bad: list[CheckpointCorruptError] = []
        for step in reversed(self.steps()):
            path = self.path(step)
            try:
                verify_file(path, where)
            except FileNotFoundError:  # rotated away since steps() listed it
                continue
            except CheckpointCorruptError as e:
                bad.append(e)
                continue
            if bad:
                names = ", ".join(str(e.path) for e in bad)
                warnings.warn(
                    f"{where}: the newest checkpoint must verify; {names} did not "
                    f"({bad[0]}); loaded {path} (step {step}), the newest valid one, instead; "
                    f"move the bad file(s) away to silence this",
                    stacklevel=2,
                )
            return torch.load(path, map_location=map_location, weights_only=weights_only)
        if bad:
            raise bad[0]
        return None
