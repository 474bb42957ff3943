"""The back-end: fsspec filesystems, made per process from a dataset's ``storage_options``.

fsspec (s3fs for S3, its HTTP filesystem on aiohttp for ``http(s)://`` and the Hugging Face
Hub, gcsfs, adlfs) was chosen over obstore by measurement (``benchmarks/remote_backends.py``,
docs/remote.md): obstore reads a small range faster and starts faster, but a process forked
from one that used it (a DataLoader worker on Linux, where fork is the default) hangs on its
first request, because its Rust runtime does not survive a fork. fsspec makes a new client in
each process and works there. The ``remote`` extra installs fsspec, s3fs and aiohttp;
``remote-gcs`` and ``remote-azure`` add gcsfs and adlfs.

Credentials come from the back-end's usual places — the environment (``AWS_*``, a profile in
``~/.aws``, instance metadata, ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_*``, ``HF_TOKEN``) —
or ``storage_options=``, whose keys are the fsspec filesystem's (``key``, ``secret``,
``endpoint_url``, ``client_kwargs``, ``profile``, ``anon`` for S3; ``headers`` for HTTP;
``token`` and ``endpoint`` for ``hf://``). :class:`Stores` keeps them for the clients it makes;
its ``repr`` names the keys only, and nothing of them goes into an index, a state, a
signature or a message.

Each :class:`Backend` does five things with an object — its size and ``ETag``
(:meth:`~Backend.info`), a byte range checked against an ``ETag`` (:meth:`~Backend.get`), its
last bytes with its size and ``ETag`` (:meth:`~Backend.tail`), all of a small one (an index,
:meth:`~Backend.whole`), and storing a small one beside it (:meth:`~Backend.put`) — raising
:class:`~._faults.Transient`, :class:`~._faults.Changed` or :class:`~._faults.Permanent`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from seekdata.sources.remote import faults as _faults
from seekdata.sources.remote.urls import Location

#: The extra that installs the back-end for each kind of store.
EXTRAS = {
    "s3": "remote",
    "http": "remote",
    "hf": "remote",
    "gs": "remote-gcs",
    "az": "remote-azure",
}
#: The packages each kind of store needs.
PACKAGES = {
    "s3": ("fsspec", "s3fs", "aiohttp"),
    "http": ("fsspec", "aiohttp"),
    "hf": ("fsspec", "aiohttp"),
    "gs": ("fsspec", "gcsfs"),
    "az": ("fsspec", "adlfs"),
}
_TIMEOUT_S = 120.0  # one request, at most


def check_options(options: Any, where: str) -> dict[str, Any]:
    """``storage_options`` as a dict of str keys (None: empty)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise TypeError(
            f"{where}: storage_options must be a dict of str keys (the fsspec filesystem's "
            f"options, e.g. {{'endpoint_url': ...}}) or None; got {type(options).__name__}"
        )
    return dict(options)


def require(loc: Location) -> None:
    """A one-line ImportError naming the extra when the back-end of ``loc`` is missing."""
    import importlib.util

    missing = [p for p in PACKAGES[loc.kind] if importlib.util.find_spec(p) is None]
    if missing:
        extra = EXTRAS[loc.kind]
        raise ImportError(
            f"{loc.url}: reading {loc.url.split(':', 1)[0]}:// URLs needs the {extra!r} extra "
            f"({', '.join(PACKAGES[loc.kind])}; missing: {', '.join(missing)}); "
            f"pip install 'seekdata[{extra}]'"
        )


class Stores:
    """A dataset's ``storage_options``, and the back-ends made from them in this process.

    Back-ends are made lazily, one per store root, and again in each process: a forked or
    spawned DataLoader worker makes its own (a client's connections and event loop do not
    survive a fork). Pickled without them.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self._reset()

    def _reset(self) -> None:
        self._backends: dict[str, Backend] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def backend(self, loc: Location) -> Backend:
        if self._pid != os.getpid():
            self._reset()
        with self._lock:
            backend = self._backends.get(loc.root)
            if backend is None:
                require(loc)
                backend = self._backends[loc.root] = _make(loc, self.options)
            return backend

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._reset()

    def __repr__(self) -> str:
        return f"Stores(storage_options keys={sorted(self.options)})"


def _make(loc: Location, options: dict[str, Any]) -> Backend:
    import fsspec

    opts = dict(options)
    try:
        if loc.kind == "s3":
            return S3Backend(fsspec.filesystem("s3", skip_instance_cache=True, **opts), loc.root)
        if loc.kind in ("http", "hf"):
            headers = dict(opts.pop("headers", None) or {})
            if loc.kind == "hf":
                opts.pop("endpoint", None)  # already part of loc.root
                token = opts.pop("token", None) or os.environ.get("HF_TOKEN")
                if token:
                    headers.setdefault("Authorization", f"Bearer {token}")
            fs = fsspec.filesystem("http", skip_instance_cache=True, **opts)
            return HTTPBackend(fs, loc.root, headers)
        if loc.kind == "gs":
            return GCSBackend(fsspec.filesystem("gcs", skip_instance_cache=True, **opts), loc.root)
        return Backend(fsspec.filesystem("az", skip_instance_cache=True, **opts), loc.root)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{loc.url}: the back-end refused storage_options with keys {sorted(options)} "
            f"({type(exc).__name__}); pass the fsspec filesystem's options for this store "
            "(docs/remote.md: credentials)"
        ) from None  # the cause may quote a secret


class Backend:
    """A store reached through an fsspec filesystem's public, synchronous API (Azure): sizes
    and ``ETag`` from ``info``, ranges from ``cat_file`` — checked for their length; a change
    of the object is seen when a dataset is built, not at each read."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs, self.root = fs, root

    def path(self, key: str) -> str:
        return f"{self.root.split('://', 1)[1]}/{key}"

    def info(self, key: str) -> tuple[int, str | None]:
        info = _call(lambda: self.fs.info(self.path(key)))
        etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
        return int(info["size"]), None if etag is None else str(etag)

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        data = _call(lambda: self.fs.cat_file(self.path(key), start=start, end=stop))
        _check_length(data, stop - start)
        return bytes(data)

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        size, etag = self.info(key)
        return size, etag, self.get(key, max(0, size - nbytes), size, etag, size)

    def whole(self, key: str) -> bytes:
        return bytes(_call(lambda: self.fs.cat_file(self.path(key))))

    def put(self, key: str, data: bytes) -> None:
        _call(lambda: self.fs.pipe_file(self.path(key), data))


class S3Backend(Backend):
    """S3 through s3fs's client: every range GET carries ``If-Match``, and its answer's
    ``ETag`` and total size (``Content-Range``) are compared with the index's."""

    def _run(self, method: str, **kwargs: Any) -> Any:
        from fsspec.asyn import sync

        async def call() -> Any:
            out = await self.fs._call_s3(method, **kwargs)
            if "Body" in out:
                async with out["Body"] as body:
                    out["Body"] = await body.read()
            return out

        return _call(lambda: sync(self.fs.loop, call, timeout=_TIMEOUT_S))

    def _where(self, key: str) -> dict[str, str]:
        return {"Bucket": self.root.split("://", 1)[1], "Key": key}

    def info(self, key: str) -> tuple[int, str | None]:
        out = self._run("head_object", **self._where(key))
        return int(out["ContentLength"]), out.get("ETag")

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        extra = {} if etag is None else {"IfMatch": etag}
        out = self._run(
            "get_object", Range=f"bytes={start}-{stop - 1}", **self._where(key), **extra
        )
        _check_answer(out.get("ContentRange"), out.get("ETag"), etag, size)
        _check_length(out["Body"], stop - start)
        return bytes(out["Body"])

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        out = self._run("get_object", Range=f"bytes=-{nbytes}", **self._where(key))
        total = _total(out.get("ContentRange")) or int(out["ContentLength"])
        _check_length(out["Body"], min(nbytes, total))
        return total, out.get("ETag"), bytes(out["Body"])

    def whole(self, key: str) -> bytes:
        return bytes(self._run("get_object", **self._where(key))["Body"])

    def put(self, key: str, data: bytes) -> None:
        self._run("put_object", Body=data, **self._where(key))


class HTTPBackend(Backend):
    """``http(s)://`` and the Hugging Face Hub: range GETs on fsspec's aiohttp session, with
    ``If-Match``, their answers checked (``206``, ``Content-Range``'s total, ``ETag``). Read
    only: an index goes under ``index_dir``."""

    def __init__(self, fs: Any, root: str, headers: dict[str, str]) -> None:
        super().__init__(fs, root)
        self.headers = headers

    def url(self, key: str) -> str:
        from urllib.parse import quote

        return f"{self.root}/{quote(key)}"

    def _request(self, method: str, key: str, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        from fsspec.asyn import sync

        async def call() -> tuple[int, Any, bytes]:
            session = await self.fs.set_session()
            wanted = {**self.headers, "Accept-Encoding": "identity", **headers}
            async with session.request(
                method, self.url(key), headers=wanted, allow_redirects=True
            ) as r:
                body = await r.read() if method == "GET" and r.status in (200, 206) else b""
                return r.status, r.headers, body

        status, answer, body = _call(lambda: sync(self.fs.loop, call, timeout=_TIMEOUT_S))
        _status(status)
        return status, answer, body

    def info(self, key: str) -> tuple[int, str | None]:
        _, answer, _ = self._request("HEAD", key, {})
        if "Content-Length" not in answer:
            raise _faults.Permanent("invalid", "the server gives no Content-Length")
        return int(answer["Content-Length"]), answer.get("ETag")

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        headers = {"Range": f"bytes={start}-{stop - 1}"}
        if etag is not None:
            headers["If-Match"] = etag
        status, answer, body = self._request("GET", key, headers)
        if status != 206 and not (status == 200 and start == 0 and stop == size):
            raise _faults.Permanent(
                "invalid", f"the server answered {status} to a Range request (it must honour Range)"
            )
        _check_answer(answer.get("Content-Range"), answer.get("ETag"), etag, size)
        _check_length(body, stop - start)
        return body

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        status, answer, body = self._request("GET", key, {"Range": f"bytes=-{nbytes}"})
        total = _total(answer.get("Content-Range")) if status == 206 else len(body)
        if total is None:
            raise _faults.Permanent("invalid", "the server's answer has no Content-Range")
        _check_length(body, min(nbytes, total))
        return total, answer.get("ETag"), body

    def whole(self, key: str) -> bytes:
        return self._request("GET", key, {})[2]

    def put(self, key: str, data: bytes) -> None:
        raise _faults.Permanent("read-only", "an http(s) store is read only")


def _status(status: int) -> None:
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


def _total(content_range: Any) -> int | None:
    """The object's size from a ``Content-Range: bytes a-b/total`` header."""
    if not content_range or "/" not in str(content_range):
        return None
    total = str(content_range).rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def _check_answer(content_range: Any, now: Any, etag: str | None, size: int) -> None:
    total = _total(content_range)
    if total is not None and total != size:
        raise _faults.Changed(f"size {size} → {total} bytes")
    if etag is not None and now is not None and now != etag:
        raise _faults.Changed(f"ETag {etag} → {now}")


def _check_length(data: Any, want: int) -> None:
    if len(data) != want:
        raise _faults.Transient(f"{len(data)} of {want} bytes arrived")


#: S3 error codes that no retry mends, and what they mean
_S3_CODES = (
    ("NoSuchKey", "missing"),
    ("NoSuchBucket", "missing"),
    ("AccessDenied", "denied"),
    ("InvalidAccessKeyId", "denied"),
    ("SignatureDoesNotMatch", "denied"),
    ("InvalidRange", "invalid"),
)


#: a 412 status in an error's text, not the digits inside a port, an address or a number
_STATUS_412 = re.compile(r"(?<![\w.:/-])412(?![\w.:])")


def _call(fn: Any) -> Any:
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
        text = f"{exc!r} {exc.__cause__!r}"
        if "PreconditionFailed" in text or _STATUS_412.search(text):
            raise _faults.Changed("the store refused If-Match (412): its ETag is another") from None
        for code, kind in _S3_CODES:
            if code in text:
                raise _faults.Permanent(kind, _faults.line(exc)) from None
        raise


class GCSBackend(Backend):
    """``gs://`` on Google Cloud Storage's JSON API, through gcsfs's authorised aiohttp session
    (its credentials, its endpoint — ``endpoint_url=`` or ``STORAGE_EMULATOR_HOST`` — and its
    requester-pays project). An object's ``ETag`` here is its *generation*, the number GCS gives
    each version of its bytes (a metadata change keeps it). Every range GET carries
    ``ifGenerationMatch`` (GCS answers 412 when another generation is live), and its answer's
    generation (``X-Goog-Generation``) and total size (``Content-Range``) are compared with the
    index's. One request per attempt: the retries are seekdata's (:mod:`.faults`), not gcsfs's
    (whose backoff is random)."""

    def _request(
        self,
        method: str,
        key: str,
        params: dict[str, str],
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[int, Any, bytes]:
        from urllib.parse import quote

        from fsspec.asyn import sync

        fs = self.fs
        bucket = quote(self.root.split("://", 1)[1], safe="")
        if data is None:
            url = f"{fs.base}b/{bucket}/o/{quote(key, safe='')}"
        else:  # an upload: the object's name is a parameter
            url = f"{fs._location}/upload/storage/v1/b/{bucket}/o"

        async def call() -> tuple[int, Any, bytes]:
            await fs._set_session()
            wanted = fs._get_headers({"Accept-Encoding": "identity", **(headers or {})})
            async with fs.session.request(
                method, url, params=fs._get_params(params), headers=wanted, data=data
            ) as r:
                return r.status, r.headers, await r.read()

        try:
            status, answer, body = sync(fs.loop, call, timeout=_TIMEOUT_S)
        except Exception as exc:
            module = type(exc).__module__ or ""
            if module.startswith("google.auth") and type(exc).__name__ != "TransportError":
                raise _faults.Permanent("denied", _faults.line(exc)) from None
            raise  # a network error: faults.retrying retries it
        if status in (200, 206):
            return status, answer, body
        detail = f"HTTP {status}{_gcs_message(body)}"
        if status == 412:
            raise _faults.Changed(
                f"generation {params.get('ifGenerationMatch')} is no longer the live one "
                f"(GCS refused ifGenerationMatch: {detail})"
            )
        if status in (404, 410):
            raise _faults.Permanent("missing", detail)
        if status in (401, 403):
            raise _faults.Permanent("denied", detail)
        if status in (408, 429) or status >= 500:
            raise _faults.Transient(detail)
        raise _faults.Permanent("invalid", detail)

    def info(self, key: str) -> tuple[int, str | None]:
        import json

        meta = json.loads(self._request("GET", key, {})[2])
        generation = meta.get("generation")
        return int(meta["size"]), None if generation is None else str(generation)

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        params = {"alt": "media"}
        if etag is not None and etag.isdigit():  # (an older index may hold another kind of tag)
            params["ifGenerationMatch"] = etag
        status, answer, body = self._request(
            "GET", key, params, {"Range": f"bytes={start}-{stop - 1}"}
        )
        if status != 206 and not (status == 200 and start == 0 and stop == size):
            raise _faults.Permanent(
                "invalid", f"the server answered {status} to a Range request (it must honour Range)"
            )
        total = _total(answer.get("Content-Range"))
        if total is not None and total != size:
            raise _faults.Changed(f"size {size} → {total} bytes")
        now = answer.get("X-Goog-Generation")
        if etag is not None and now is not None and now != etag:
            raise _faults.Changed(f"generation {etag} → {now}")
        _check_length(body, stop - start)
        return body

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        status, answer, body = self._request(
            "GET", key, {"alt": "media"}, {"Range": f"bytes=-{nbytes}"}
        )
        generation = answer.get("X-Goog-Generation")
        if generation is None:  # a server that does not say: its generation, then those bytes
            size, generation = self.info(key)
            return size, generation, self.get(key, max(0, size - nbytes), size, generation, size)
        total = _total(answer.get("Content-Range")) if status == 206 else len(body)
        if total is None:
            raise _faults.Permanent("invalid", "the server's answer has no Content-Range")
        _check_length(body, min(nbytes, total))
        return total, str(generation), body

    def whole(self, key: str) -> bytes:
        return self._request("GET", key, {"alt": "media"})[2]

    def put(self, key: str, data: bytes) -> None:
        params = {"uploadType": "media", "name": key}
        self._request("POST", key, params, {"Content-Type": "application/octet-stream"}, data)


def _gcs_message(body: bytes) -> str:
    """``": message"`` of a GCS error answer (JSON ``{"error": {"message": ...}}``), or ``""``."""
    import json

    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    lines = str(message).strip().splitlines()
    return f": {lines[0][:200]}" if lines else ""
