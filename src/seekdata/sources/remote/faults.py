"""What a failed remote read means, and retrying the ones that pass.

A read either returns exactly the bytes asked for, of the object the index describes, or
fails. Failures are of three kinds:

- transient — a dropped or reset connection, a timeout, a 5xx answer, throttling (503
  ``SlowDown``, 429), a body shorter than asked for: retried with exponential backoff, up to
  :data:`ATTEMPTS` attempts in all and :data:`DEADLINE_S` seconds for the whole read (each
  request at most ``stores.TIMEOUT_S``), then an ``OSError`` naming the URL;
- unreachable — the connection is refused (a wrong endpoint or port, a server that is not
  running): :data:`CONNECT_ATTEMPTS` attempts, then an ``OSError`` naming the endpoint;
- permanent — the object is missing (404), access is refused (401, 403), no credentials
  were found, the request is wrong (another 4xx), the server does not honour ``Range`` or
  answers another range than the one asked for, or the object changed under its index (its
  ``ETag``, ``Last-Modified`` or size differ, a failed ``If-Match``): a ``ValueError`` at once,
  after one attempt, naming the URL and the fix.

A retry repeats the same request, so a sample is never skipped, read twice into a batch, or
assembled from two versions of an object: the caller gets the whole range or an error.
Backoff is deterministic (no jitter drawn from any random stream): ``BACKOFF_S · 2^k``,
capped at ``MAX_BACKOFF_S``.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from typing import TypeVar

#: Attempts per request, the first included.
ATTEMPTS = 8
#: The first wait after a transient failure, doubled after each further one...
BACKOFF_S = 0.05
#: ... up to this.
MAX_BACKOFF_S = 2.0
#: Seconds one read may take in all, its retries and their waits included (a slow body is
#: given up after this, not retried for ATTEMPTS x the timeout of one request).
DEADLINE_S = 300.0
#: Attempts when the connection is refused (a wrong endpoint or port fails within a second).
CONNECT_ATTEMPTS = 3

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("deadline", default=None)

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


def remaining(limit: float) -> float:
    """Seconds one request may take: ``limit``, or less when the read it belongs to (a call of
    :func:`retrying` in this thread) has less than that left of its :data:`DEADLINE_S`."""
    deadline = _deadline.get()
    if deadline is None:
        return limit
    return max(0.001, min(limit, deadline - time.monotonic()))


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
    if kind == "credentials":
        return ValueError(
            f"{url}: no credentials were found for this store (could not {what}: {detail}); "
            "give them through the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE or ~/.aws/credentials for S3) or storage_options= (e.g. {'key': ..., "
            "'secret': ...}; {'anon': True} for a public bucket; docs/remote.md: credentials)"
        )
    if kind == "range":
        return ValueError(
            f"{url}: {detail}; the bytes it sent are not the ones asked for, and none of them is "
            "served. Read it from a server that honours Range requests (HTTP 206 with the "
            "asked Content-Range), or copy the file to one (a bucket, a static file server)"
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
    (aiohttp's, botocore's, a timeout), up to ``attempts`` attempts and :data:`DEADLINE_S`
    seconds in all; a refused connection up to :data:`CONNECT_ATTEMPTS`. A bug of the caller
    (``TypeError``, ...) propagates.
    """
    last: BaseException | None = None
    start = time.monotonic()
    end = start + DEADLINE_S
    token = _deadline.set(end)
    refused = 0
    try:
        for attempt in range(attempts):
            if attempt:
                wait = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (attempt - 1))
                if time.monotonic() + wait >= end:
                    break
                time.sleep(wait)
            try:
                return call()
            except (Changed, Permanent) as exc:
                raise permanent_error(url, exc, what) from None
            except Exception as exc:
                if not (isinstance(exc, (Transient, OSError, TimeoutError)) or _network(exc)):
                    raise
                last = exc
                refused = refused + 1 if _refused(exc) else 0
                if refused >= CONNECT_ATTEMPTS:
                    raise OSError(
                        f"{url}: could not {what}: the connection was refused {refused} times "
                        f"in a row (last: {line(exc)}); check the endpoint and its port "
                        "(storage_options={'endpoint_url': ...} or AWS_ENDPOINT_URL for S3, the "
                        "host in the URL for http(s)://) and that the server is running"
                    ) from exc
            if time.monotonic() >= end:
                break
    finally:
        _deadline.reset(token)
    assert last is not None
    if time.monotonic() >= end or attempt + 1 < attempts:
        raise OSError(
            f"{url}: could not {what} within {DEADLINE_S:g} s, the most one read may take "
            f"(its retries included: {attempt + 1} attempts, each failing transiently; last: "
            f"{line(last)}); the store answers too slowly or not at all — check the network "
            "and the endpoint, or retry the job"
        ) from last
    raise OSError(
        f"{url}: could not {what} after {attempts} attempts, each failing transiently (last: "
        f"{line(last)}); check the network and the endpoint, or retry the job"
    ) from last


def _refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a refused connection."""
    for _ in range(8):
        if exc is None:
            return False
        if isinstance(exc, ConnectionRefusedError):
            return True
        os_error = getattr(exc, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(os_error, ConnectionRefusedError) or "Connection refused" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _network(exc: BaseException) -> bool:
    """An error of the network stack under the back-end (aiohttp, botocore, asyncio)."""
    module = type(exc).__module__ or ""
    return module.split(".")[0] in ("aiohttp", "botocore", "aiobotocore", "urllib3", "asyncio")
