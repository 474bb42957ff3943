"""What every back-end shares: the :class:`Backend` base (a store read through an fsspec
filesystem's public API) and the checks every answer to a request gets, sorted into
:class:`~._faults.Transient`, :class:`~._faults.Changed` and :class:`~._faults.Permanent`.

Its own module so that each back-end (:mod:`.stores`' fsspec ones, :mod:`.obstores`) builds on
it, and :mod:`.stores`, which picks the back-end, imports them without a circle.
"""

from __future__ import annotations

import re
from typing import Any

from seekdata.sources.remote import faults as _faults

#: Seconds one request may take, its body included (and less when the read it belongs to
#: has less left of ``faults.DEADLINE_S``).
TIMEOUT_S = 120.0
#: How a version taken from ``Last-Modified`` (a server that sends no ``ETag``) is written.
LAST_MODIFIED = "last-modified: "


class Backend:
    """A store reached through an fsspec filesystem's public, synchronous API (Azure): sizes
    and ``ETag`` from ``info``, ranges from ``cat_file`` — checked for their length; a change
    of the object is seen when a dataset is built, not at each read."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs, self.root = fs, root

    def path(self, key: str) -> str:
        return f"{self.root.split('://', 1)[1]}/{key}"

    def info(self, key: str) -> tuple[int, str | None]:
        info = call_sorted(lambda: self.fs.info(self.path(key)))
        etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
        return int(info["size"]), None if etag is None else str(etag)

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        data = call_sorted(lambda: self.fs.cat_file(self.path(key), start=start, end=stop))
        check_length(data, stop - start)
        return bytes(data)

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        size, etag = self.info(key)
        return size, etag, self.get(key, max(0, size - nbytes), size, etag, size)

    def whole(self, key: str) -> bytes:
        return bytes(call_sorted(lambda: self.fs.cat_file(self.path(key))))

    def put(self, key: str, data: bytes) -> None:
        call_sorted(lambda: self.fs.pipe_file(self.path(key), data))

    def delete(self, key: str) -> None:
        """Remove a small object this library wrote (a build's part record)."""
        call_sorted(lambda: self.fs.rm_file(self.path(key)))


def check_status(status: int) -> None:
    if status in (200, 206):
        return
    kinds = {404: "missing", 410: "missing", 401: "denied", 403: "denied", 412: "changed"}
    if status in kinds:
        if kinds[status] == "changed":
            raise _faults.Changed("the server refused If-Match (412): its ETag is another")
        raise _faults.Permanent(kinds[status], f"HTTP {status}")
    if status == 429 or status >= 500 or status == 408:
        raise _faults.Transient(f"HTTP {status}")
    raise _faults.Permanent("invalid", f"HTTP {status}")


_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


def check_range(
    status: int, content_range: Any, start: int, stop: int, size: int, etag: Any, now: Any
) -> None:
    """That an answer to a request for bytes ``[start, stop)`` holds those bytes: a ``206``
    whose ``Content-Range`` is exactly them, or a ``200`` for a request of the whole object
    that carries its recorded version (``etag``; ``now``: the answer's). A
    :class:`~._faults.Permanent` ("range") naming what was asked and what came back, else."""
    asked = f"asked for bytes {start}-{stop - 1} of {size}"
    if status == 200:
        if start == 0 and stop == size and etag is not None and now == etag:
            return  # the whole object, provably the version the index describes
        why = (
            "not the whole object"
            if (start, stop) != (0, size)
            else "with no version to prove it the object the index describes"
        )
        raise _faults.Permanent(
            "range",
            f"{asked}, the server answered 200 (a whole answer, {why}): it does not honour Range",
        )
    match = _CONTENT_RANGE.match(str(content_range or ""))
    if match is None:
        raise _faults.Permanent(
            "range", f"{asked}, the server answered {status} with Content-Range {content_range!r}"
        )
    a, b, total = int(match.group(1)), int(match.group(2)), match.group(3)
    if total != "*" and int(total) != size:
        raise _faults.Changed(f"size {size} → {total} bytes")
    if (a, b) != (start, stop - 1):
        raise _faults.Permanent(
            "range", f"{asked}, the server answered bytes {a}-{b}/{total} (another range)"
        )


def total_of(content_range: Any) -> int | None:
    """The object's size from a ``Content-Range: bytes a-b/total`` header."""
    if not content_range or "/" not in str(content_range):
        return None
    total = str(content_range).rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def check_answer(content_range: Any, now: Any, etag: str | None, size: int) -> None:
    total = total_of(content_range)
    if total is not None and total != size:
        raise _faults.Changed(f"size {size} → {total} bytes")
    if etag is not None and now is not None and now != etag:
        if etag.startswith(LAST_MODIFIED):
            n = len(LAST_MODIFIED)
            raise _faults.Changed(f"Last-Modified {etag[n:]} → {str(now)[n:]}")
        raise _faults.Changed(f"ETag {etag} → {now}")


def check_length(data: Any, want: int) -> None:
    if len(data) != want:
        raise _faults.Transient(f"{len(data)} of {want} bytes arrived")


#: S3 error codes that no retry mends, and what they mean
S3_CODES = (
    ("NoSuchKey", "missing"),
    ("NoSuchBucket", "missing"),
    ("AccessDenied", "denied"),
    ("InvalidAccessKeyId", "denied"),
    ("SignatureDoesNotMatch", "denied"),
    ("InvalidRange", "invalid"),
    ("ExpiredToken", "denied"),
    ("InvalidToken", "denied"),
)
#: botocore's errors for credentials that were not found or could not be loaded: no retry
#: finds them
CREDENTIAL_ERRORS = (
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
    "NoAuthTokenError",
    "UnauthorizedSSOTokenError",
    "SSOTokenLoadError",
)


#: a 412 status in an error's text, not the digits inside a port, an address or a number
_STATUS_412 = re.compile(r"(?<![\w.:/-])412(?![\w.:])")


def call_sorted(fn: Any) -> Any:
    """``fn()``, its errors sorted: a permanent one as :class:`~._faults.Permanent`, an
    object changed under its index as :class:`~._faults.Changed`, the rest as they are (the
    retry loop treats network errors as transient)."""
    try:
        return fn()
    except (_faults.Transient, _faults.Changed, _faults.Permanent):
        raise
    except FileNotFoundError as exc:
        raise _faults.Permanent("missing", _faults.line(exc)) from None
    except PermissionError as exc:
        raise _faults.Permanent("denied", _faults.line(exc)) from None
    except Exception as exc:
        if any(c.__name__ in CREDENTIAL_ERRORS for c in type(exc).__mro__):
            raise _faults.Permanent("credentials", _faults.line(exc)) from None
        text = f"{exc!r} {exc.__cause__!r}"
        if "PreconditionFailed" in text or _STATUS_412.search(text):
            raise _faults.Changed("the store refused If-Match (412): its ETag is another") from None
        for code, kind in S3_CODES:
            if code in text:
                raise _faults.Permanent(kind, _faults.line(exc)) from None
        raise
