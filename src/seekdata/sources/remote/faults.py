"""What a failed remote read means, and retrying the ones that pass.

A read either returns exactly the bytes asked for, of the object the index describes, or
fails. Failures are of two kinds:

- transient — a dropped or reset connection, a timeout, a 5xx answer, throttling (503
  ``SlowDown``, 429), a body shorter than asked for: retried with exponential backoff, up to
  :data:`ATTEMPTS` attempts in all, then an ``OSError`` naming the URL;
- permanent — the object is missing (404), access is refused (401, 403), the request is
  wrong (another 4xx), or the object changed under its index (its ``ETag`` or size differ, a
  failed ``If-Match``): a ``ValueError`` at once, naming the URL and the fix.

A retry repeats the same request, so a sample is never skipped, read twice into a batch, or
assembled from two versions of an object: the caller gets the whole range or an error.
Backoff is deterministic (no jitter drawn from any random stream): ``BACKOFF_S · 2^k``,
capped at ``MAX_BACKOFF_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

#: Attempts per request, the first included.
ATTEMPTS = 8
#: The first wait after a transient failure, doubled after each further one...
BACKOFF_S = 0.05
#: ... up to this.
MAX_BACKOFF_S = 2.0

T = TypeVar("T")


class Transient(Exception):
    """A failure worth retrying."""


class Changed(Exception):
    """The object is not the one its index describes."""


class Permanent(Exception):
    """A failure no retry mends: ``kind`` is "missing", "denied", "read-only" or "invalid"."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def line(exc: BaseException) -> str:
    """The first line of ``exc``, with its type: for messages (never a whole server answer)."""
    lines = [s for s in str(exc).strip().splitlines() if s.strip()]
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def permanent_error(url: str, exc: BaseException, what: str) -> ValueError:
    """The ``ValueError`` for a permanent failure of ``what`` (e.g. "read bytes 0-511")."""
    kind = "changed" if isinstance(exc, Changed) else getattr(exc, "kind", "invalid")
    detail = str(exc)
    if kind == "missing":
        return ValueError(
            f"{url} does not exist (could not {what}: {detail}); check the URL, the bucket and "
            "the endpoint (storage_options={'endpoint_url': ...})"
        )
    if kind == "denied":
        return ValueError(
            f"{url}: access denied (could not {what}: {detail}); give credentials through the "
            "environment or storage_options= (docs/remote.md: credentials), or check the "
            "bucket's policy"
        )
    if kind == "changed":
        return ValueError(
            f"{url} changed after its index was built ({detail}); its bytes no longer sit where "
            "the index says, and positions saved in a checkpoint may now name other samples. "
            "If the change is intended, rebuild the index (rebuild_index=True, or "
            "`seekdata index URL --force`); else restore the object"
        )
    return ValueError(f"{url}: could not {what} ({detail}); check the URL and storage_options=")


def retrying(url: str, what: str, call: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """``call()``, retried while it fails transiently; permanent failures raise at once.

    Transient: :class:`Transient`, and any ``OSError`` or network error of the back-end
    (aiohttp's, botocore's, a timeout). A bug of the caller (``TypeError``, ...) propagates.
    """
    last: BaseException | None = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (attempt - 1)))
        try:
            return call()
        except (Changed, Permanent) as exc:
            raise permanent_error(url, exc, what) from None
        except Exception as exc:
            if not (isinstance(exc, (Transient, OSError, TimeoutError)) or _network(exc)):
                raise
            last = exc
    assert last is not None
    raise OSError(
        f"{url}: could not {what} after {attempts} attempts, each failing transiently (last: "
        f"{line(last)}); check the network and the endpoint, or retry the job"
    ) from last


def _network(exc: BaseException) -> bool:
    """An error of the network stack under the back-end (aiohttp, botocore, asyncio)."""
    module = type(exc).__module__ or ""
    return module.split(".")[0] in ("aiohttp", "botocore", "aiobotocore", "urllib3", "asyncio")
