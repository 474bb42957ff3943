"""The obstore back-end for ``s3://``, used where it can run: never after a ``fork()``.

obstore (Rust's ``object_store`` under Python) starts a client in a tenth of s3fs's time and
spends less CPU per byte (``benchmarks/remote_backends.py``, docs/remote.md), but a process
forked from one that has used it hangs on its first obstore request: its runtime's threads do
not survive the fork. So it is the default only where no fork follows: the main process (which
builds datasets and reads under ``num_workers=0`` and thread workers) of a job that has not
forked since; a process forked after this one used obstore — a DataLoader worker process —
reads through fsspec instead (:func:`usable`, decided by :func:`_after_fork_in_child`, an
``os.register_at_fork`` hook), and never touches the obstore clients it inherited.

Only what seekdata can map is taken: credentials given in ``storage_options`` (``key`` and
``secret``, or ``anon``), with ``endpoint_url`` or a region (:func:`config`); for anything else
(a profile, SSO, instance metadata, botocore's own options) boto's credential chain is the
one users know, and fsspec keeps it. Every read is checked as the fsspec back-end's is: the
``If-Match`` of the index's ``ETag``, the range, size and ``ETag`` of the answer, its length.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import Any

from seekdata.sources.remote import faults as _faults
from seekdata.sources.remote.answers import (
    S3_CODES,
    TIMEOUT_S,
    Backend,
    check_answer,
    check_length,
    check_status,
)

#: ``storage_options`` keys this back-end maps onto obstore's ``S3Store`` (others: fsspec)
KEYS = ("key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs", "anon")

#: Session tokens obstore takes from the environment even where keys are given (boto does not)
_ENV_TOKENS = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
#: Whether this process has made an obstore client (a fork after it makes the child unable to
#: use obstore).
used = False
#: Whether this process was forked from one that had used obstore: it must not use it.
forked_after_use = False
#: The clients this process made; kept for its life (and in a forked child, never dropped:
#: dropping one there would touch the parent's runtime).
_made: list[Any] = []


def installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("obstore") is not None


def usable() -> bool:
    """Whether obstore can run in this process: installed, and not forked after its use."""
    return not forked_after_use and installed()


def _after_fork_in_child() -> None:
    global forked_after_use
    if used:
        forked_after_use = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def config(options: dict[str, Any]) -> dict[str, Any] | None:
    """``storage_options`` as ``S3Store`` keyword arguments, or None when they cannot be mapped
    whole: a key of another meaning, or no explicit credentials with an endpoint or region."""
    if any(k not in KEYS for k in options):
        return None
    client = dict(options.get("client_kwargs") or {})
    if any(k not in ("region_name", "endpoint_url") for k in client):
        return None
    if any(k != "retries" for k in options.get("config_kwargs") or {}):
        return None
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    region = client.get("region_name")
    anon = bool(options.get("anon"))
    if not (anon or (options.get("key") and options.get("secret"))):
        return None  # the environment's or a profile's credentials: boto's chain, fsspec
    if not anon and not options.get("token") and any(map(os.environ.get, _ENV_TOKENS)):
        return None  # obstore would add the environment's session token to the keys given
    if endpoint is None and region is None:
        return None  # the bucket's region found by s3fs; obstore would assume one
    out: dict[str, Any] = {
        "client_options": {"timeout": f"{int(TIMEOUT_S)}s", "connect_timeout": "10s"},
        # one request per attempt: the retries are seekdata's (faults.retrying)
        "retry_config": {"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=1)},
    }
    if anon:
        out["skip_signature"] = True
    else:
        out["access_key_id"], out["secret_access_key"] = options["key"], options["secret"]
        if options.get("token"):
            out["session_token"] = options["token"]
    if endpoint is not None:
        out["endpoint"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            out["client_options"]["allow_http"] = True
    out["region"] = region or "us-east-1"  # (an endpoint of one's own: any region signs)
    return out


def make(bucket: str, kwargs: dict[str, Any]) -> Any:
    """A new ``S3Store`` for ``bucket``; marks this process as one that used obstore."""
    global used
    if forked_after_use:
        raise RuntimeError(
            "obstore cannot run in a process forked from one that used it (its requests hang "
            "there); use storage_options={'backend': 'fsspec'}, or worker_method='thread', or "
            "multiprocessing_context='spawn' for the DataLoader's workers"
        )
    from obstore.store import S3Store

    store = S3Store(bucket, **kwargs)
    used = True
    _made.append(store)
    return store


class ObstoreS3Backend(Backend):
    """``s3://`` through obstore: the five operations of :class:`~.answers.Backend`, checked
    (``fs`` is None: no fsspec filesystem)."""

    def __init__(self, store: Any, root: str) -> None:
        super().__init__(None, root)
        self.store = store

    def info(self, key: str) -> tuple[int, str | None]:
        import obstore

        meta = _call(lambda: obstore.head(self.store, key))
        return int(meta["size"]), meta.get("e_tag")

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        import obstore

        options: Any = {"range": (start, stop)}
        if etag is not None:
            options["if_match"] = etag
        result = _call(lambda: obstore.get(self.store, key, options=options))
        got = tuple(result.range)
        if got != (start, stop):
            raise _faults.Permanent(
                "range",
                f"asked for bytes {start}-{stop - 1} of {size}, the server answered bytes "
                f"{got[0]}-{got[1] - 1} (another range)",
            )
        meta = result.meta
        check_answer(f"bytes {start}-{stop - 1}/{meta['size']}", meta.get("e_tag"), etag, size)
        data = _call(lambda: bytes(result.bytes()))
        check_length(data, stop - start)
        return data

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        import obstore

        result = _call(lambda: obstore.get(self.store, key, options={"range": {"suffix": nbytes}}))
        meta = result.meta
        data = _call(lambda: bytes(result.bytes()))
        check_length(data, min(nbytes, int(meta["size"])))
        return int(meta["size"]), meta.get("e_tag"), data

    def whole(self, key: str) -> bytes:
        import obstore

        return _call(lambda: bytes(obstore.get(self.store, key).bytes()))

    def put(self, key: str, data: bytes) -> None:
        import obstore

        _call(lambda: obstore.put(self.store, key, data))

    def delete(self, key: str) -> None:
        import obstore

        _call(lambda: obstore.delete(self.store, key))


_STATUS = re.compile(r"status code: (\d{3})")


def _call(fn: Any) -> Any:
    """``fn()``, obstore's errors sorted as :func:`.answers.call_sorted` sorts fsspec's: a changed
    object, a permanent failure (by the HTTP status or the S3 code in the error), a refused
    connection (``ConnectionRefusedError``), else a transient failure."""
    from obstore import exceptions as ox

    try:
        return fn()
    except ox.PreconditionError:
        raise _faults.Changed("the store refused If-Match (412): its ETag is another") from None
    except FileNotFoundError as exc:
        raise _faults.Permanent("missing", _faults.line(exc)) from None
    except (PermissionError, ox.UnauthenticatedError) as exc:
        raise _faults.Permanent("denied", _faults.line(exc)) from None
    except ox.BaseError as exc:
        text = str(exc)
        for code, kind in S3_CODES:
            if code in text:
                raise _faults.Permanent(kind, _faults.line(exc)) from None
        status = _STATUS.search(text)
        if status is not None:
            check_status(int(status.group(1)))  # raises for every status but 200 and 206
        if "Connection refused" in text or "ConnectionRefused" in text:
            raise ConnectionRefusedError(_faults.line(exc)) from None
        raise _faults.Transient(_faults.line(exc)) from None
