"""The back-end: clients made per process from a dataset's ``storage_options``.

fsspec (s3fs for S3, its HTTP filesystem on aiohttp for ``http(s)://`` and the Hugging Face
Hub, gcsfs, adlfs) reads every kind of store; ``s3://`` is read through obstore instead where
it can run (:mod:`.obstores`: installed, credentials it can take, and no fork since this
process used it). The choice was made by measurement (``benchmarks/remote_backends.py``,
``benchmarks/remote_threads.py``, docs/remote.md): obstore starts a client in a tenth of
s3fs's time and spends less CPU per byte, but a process forked from one that used it (a
DataLoader worker on Linux, where fork is the default) hangs on its first request, because its
Rust runtime does not survive a fork; fsspec makes a new client in each process and works
there. ``storage_options={"backend": "fsspec" | "obstore"}`` overrides the choice
(:data:`BACKEND`). The ``remote`` extra installs fsspec, s3fs and aiohttp; ``remote-gcs``
and ``remote-azure`` add gcsfs and adlfs; obstore is installed on its own.

A process makes one client per store root and set of options (:func:`client`), shared by all
its datasets and threads — the loader's, thread workers', the request threads; a forked child
makes its own and never tears down its parent's (:func:`_after_fork_in_child`).

Credentials come from the back-end's usual places — the environment (``AWS_*``, a profile in
``~/.aws``, instance metadata, ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_*``, ``HF_TOKEN``) —
or ``storage_options=``, whose keys are the fsspec filesystem's (``key``, ``secret``,
``endpoint_url``, ``client_kwargs``, ``profile``, ``anon`` for S3; ``headers`` for HTTP;
``token`` and ``endpoint`` for ``hf://``). :class:`Stores` keeps them for the clients it makes;
its ``repr`` names the keys only, and nothing of them goes into an index, a state, a
signature or a message.

Each :class:`Backend` does five things with an object — its size and version
(:meth:`~Backend.info`), a byte range checked against that version (:meth:`~Backend.get`), its
last bytes with its size and version (:meth:`~Backend.tail`), all of a small one (an index,
:meth:`~Backend.whole`), and storing a small one beside it (:meth:`~Backend.put`) — raising
:class:`~._faults.Transient`, :class:`~._faults.Changed` or :class:`~._faults.Permanent`.

An object's *version* is what the store says identifies its bytes: the ``ETag`` (a GCS
generation), else, from an HTTP server that sends no ``ETag``, its ``Last-Modified`` date,
kept as ``"last-modified: <date>"`` (:data:`LAST_MODIFIED`) and sent as
``If-Unmodified-Since``; None when the server sends neither (the dataset warns at build).

Every answer to a range request is checked against what was asked: a ``206`` must carry the
``Content-Range`` of exactly the asked bytes and the object's size; a ``200`` (the whole
object) is taken only for a request of the whole object, of its recorded size and version,
and never when it is an HTML page; anything else is a permanent failure naming what was
asked and what came back, never retried (the server would answer the same).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from seekdata.sources.remote import faults as _faults
from seekdata.sources.remote.answers import (
    LAST_MODIFIED,
    TIMEOUT_S,
    Backend,
    call_sorted,
    check_answer,
    check_length,
    check_range,
    check_status,
    total_of,
)
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


#: The ``storage_options`` key that picks the client library: ``"auto"`` (the default:
#: obstore for ``s3://`` where it can run, :mod:`.obstores`; fsspec elsewhere), ``"fsspec"`` or
#: ``"obstore"`` (``s3://`` only).
BACKEND = "backend"
BACKENDS = ("auto", "fsspec", "obstore")


def check_options(options: Any, where: str) -> dict[str, Any]:
    """``storage_options`` as a dict of str keys (None: empty)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise TypeError(
            f"{where}: storage_options must be a dict of str keys (the fsspec filesystem's "
            f"options, e.g. {{'endpoint_url': ...}}) or None; got {type(options).__name__}"
        )
    choice = options.get(BACKEND, "auto")
    if choice not in BACKENDS:
        raise ValueError(
            f"{where}: storage_options['backend'] must be one of {', '.join(map(repr, BACKENDS))} "
            f"(the client library that reads the store); got {choice!r}"
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
            f"pip install -e '.[{extra}]' in a clone of seekdata (pip install "
            f"'seekdata[{extra}]' once seekdata is on PyPI)"
        )


class Stores:
    """A dataset's ``storage_options``, and the back-ends made from them in this process.

    Back-ends are made lazily, one per store root and set of options *per process*: every
    dataset of the process with the same options (and every thread of it — the loader's,
    thread workers', the request threads) shares one client (:func:`client`). A forked or
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
        backend = self._backends.get(loc.root)  # (a dict read: atomic)
        if backend is None:
            with self._lock:
                backend = self._backends.get(loc.root)
                if backend is None:
                    backend = self._backends[loc.root] = client(loc, self.options)
        return backend

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._reset()

    def __repr__(self) -> str:
        return f"Stores(storage_options keys={sorted(self.options)})"


#: the fsspec protocol of each kind of store
_PROTOCOLS = {"s3": "s3", "http": "http", "hf": "http", "gs": "gcs", "az": "az"}
#: keys seekdata itself reads, by kind of store (before the filesystem's own)
_OWN_KEYS = {"http": ("headers",), "hf": ("headers", "token", "endpoint")}
#: keys every fsspec filesystem takes through ``**storage_options`` (its listings cache)
_FSSPEC_KEYS = ("use_listings_cache", "listings_expiry_time", "max_paths")


def accepted_keys(kind: str) -> list[str]:
    """The ``storage_options`` keys a store of ``kind`` takes: the named parameters of its
    fsspec filesystem's constructor (and of the classes it derives from), and seekdata's own."""
    import inspect

    import fsspec

    cls = fsspec.get_filesystem_class(_PROTOCOLS[kind])
    names = set(_OWN_KEYS.get(kind, ())) | set(_FSSPEC_KEYS) | {BACKEND}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        names.update(p.name for p in params if p.kind in kinds and p.name != "self")
    return sorted(names)


def check_keys(loc: Location, options: dict[str, Any]) -> None:
    """A ``ValueError`` naming each key of ``options`` that the store of ``loc`` does not take
    (fsspec passes unknown keys on to the client, which refuses them only at the first
    request, with a bare ``TypeError``)."""
    known = accepted_keys(loc.kind)
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        scheme = loc.url.split(":", 1)[0]
        raise ValueError(
            f"{loc.url}: storage_options has {'keys' if len(unknown) > 1 else 'a key'} that a "
            f"{scheme}:// store does not take: {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(known)} (the fsspec filesystem's options; request parameters for S3 "
            "go in s3_additional_kwargs, client options in client_kwargs or config_kwargs)"
        )


#: This process's clients, by store root and options (emptied in a forked child).
_clients: dict[tuple[str, str], Backend] = {}
_clients_lock = threading.Lock()


def client(loc: Location, options: dict[str, Any]) -> Backend:
    """This process's back-end for the store of ``loc`` with ``options``: made at the first
    call, shared by every later one (every :class:`Stores` with equal options, every thread)."""
    import json

    key = (loc.root, json.dumps(options, sort_keys=True, default=repr))
    with _clients_lock:
        backend = _clients.get(key)
        if backend is None:
            require(loc)
            backend = _clients[key] = _make(loc, options)
        return backend


def backend_name(backend: Backend) -> str:
    """``"obstore"`` or ``"fsspec"``: which library a back-end reads through."""
    return "obstore" if getattr(backend, "fs", None) is None else "fsspec"


#: The filesystems this process made (by id: fsspec filesystems of equal options compare equal).
_made: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
#: Those a forked child inherited from its parent: kept from collection for the child's life.
_inherited: list[Any] = []


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) makes clients of its own (:class:`Stores`) and never
    tears down its parent's: their connections and event loop are the parent's. Collected in
    the child, a client is closed by fsspec's finalizer — on the child's event loop when the
    collection happens on that loop's thread, where it fails ("Task exception was never
    retrieved ... attached to a different loop", a traceback on stderr for each), else by
    waiting a second for the parent's loop, which does not run here, then closing the sockets
    through the parent's epoll set, which the child shares. So the child keeps them (a few
    objects), detaches their finalizers, and lets the process end without touching them."""
    global _made, _clients_lock
    _inherited.extend(_clients.values())  # (obstore clients too: never dropped here)
    _clients.clear()
    _clients_lock = threading.Lock()
    parents = list(_made.values())
    _made = weakref.WeakValueDictionary()
    _inherited.extend(parents)
    ids = {id(fs) for fs in parents}
    # the finalizers fsspec registered for them (weakref.finalize, at a client's first
    # request); CPython lists live finalizers only in this private registry, and there is no
    # public way to find an object's: without it, the clients are still kept from collection
    registry = getattr(weakref.finalize, "_registry", {})
    for finalizer, info in list(registry.items()):
        if id(getattr(info, "weakref", lambda: None)()) in ids:
            finalizer.detach()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _make(loc: Location, options: dict[str, Any]) -> Backend:
    backend = _obstore_backend(loc, options) or _make_backend(loc, options)
    if backend.fs is not None:
        _made[id(backend.fs)] = backend.fs
    return backend


def _obstore_backend(loc: Location, options: dict[str, Any]) -> Backend | None:
    """The obstore back-end where ``options`` ask for it or ``"auto"`` finds that it can run
    (:mod:`.obstores`); None: fsspec's."""
    from seekdata.sources.remote import obstores

    choice = options.get(BACKEND, "auto")
    if choice == "fsspec" or (choice == "auto" and (loc.kind != "s3" or not obstores.usable())):
        return None
    rest = {k: v for k, v in options.items() if k != BACKEND}
    kwargs = obstores.config(rest) if loc.kind == "s3" else None
    if choice == "auto":
        return None if kwargs is None else _obstore(obstores, loc, kwargs)
    if loc.kind != "s3":
        raise ValueError(
            f"{loc.url}: storage_options={{'backend': 'obstore'}} reads s3:// URLs only; "
            f"leave 'backend' out (or pass 'fsspec') for {loc.url.split(':', 1)[0]}:// URLs"
        )
    if not obstores.installed():
        raise ImportError(
            f"{loc.url}: storage_options={{'backend': 'obstore'}} needs obstore; pip install "
            "obstore, or leave 'backend' out"
        )
    if kwargs is None:
        raise ValueError(
            f"{loc.url}: storage_options={{'backend': 'obstore'}} takes explicit credentials "
            f"(key and secret, or anon=True) with endpoint_url or client_kwargs' region_name, "
            f"and only the keys {', '.join(obstores.KEYS)}; got keys {sorted(rest)}; pass "
            "those, or leave 'backend' out (fsspec reads with boto's credential chain)"
        )
    return _obstore(obstores, loc, kwargs)


def _obstore(obstores: Any, loc: Location, kwargs: dict[str, Any]) -> Backend:
    bucket = loc.root.split("://", 1)[1]
    backend: Backend = obstores.ObstoreS3Backend(obstores.make(bucket, kwargs), loc.root)
    return backend


def _make_backend(loc: Location, options: dict[str, Any]) -> Backend:
    import fsspec

    options = {k: v for k, v in options.items() if k != BACKEND}
    check_keys(loc, options)
    opts = dict(options)
    try:
        if loc.kind == "s3":
            # one request per attempt: the retries are seekdata's (faults.retrying), bounded
            # and deterministic, not botocore's and s3fs's on top of them (a refused connection
            # took a minute to fail through all three)
            config = dict(opts.pop("config_kwargs", None) or {})
            config.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
            fs = fsspec.filesystem("s3", skip_instance_cache=True, config_kwargs=config, **opts)
            fs.retries = 1
            return S3Backend(fs, loc.root)
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


class S3Backend(Backend):
    """S3 through s3fs's client: every range GET carries ``If-Match``, and its answer's
    ``ETag`` and total size (``Content-Range``) are compared with the index's."""

    def _run(self, method: str, **kwargs: Any) -> Any:
        async def call() -> Any:
            out = await self.fs._call_s3(method, **kwargs)
            if "Body" in out:
                async with out["Body"] as body:
                    out["Body"] = await body.read()
            return out

        return call_sorted(lambda: _sync(self.fs.loop, call))

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
        status = int(out.get("ResponseMetadata", {}).get("HTTPStatusCode", 206))
        check_range(status, out.get("ContentRange"), start, stop, size, etag, out.get("ETag"))
        check_answer(out.get("ContentRange"), out.get("ETag"), etag, size)
        check_length(out["Body"], stop - start)
        return bytes(out["Body"])

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        out = self._run("get_object", Range=f"bytes=-{nbytes}", **self._where(key))
        total = total_of(out.get("ContentRange")) or int(out["ContentLength"])
        check_length(out["Body"], min(nbytes, total))
        return total, out.get("ETag"), bytes(out["Body"])

    def whole(self, key: str) -> bytes:
        return bytes(self._run("get_object", **self._where(key))["Body"])

    def put(self, key: str, data: bytes) -> None:
        self._run("put_object", Body=data, **self._where(key))

    def delete(self, key: str) -> None:
        self._run("delete_object", **self._where(key))


class HTTPBackend(Backend):
    """``http(s)://`` and the Hugging Face Hub: range GETs on fsspec's aiohttp session, with
    ``If-Match`` (``If-Unmodified-Since`` for a server that gives only ``Last-Modified``; no
    precondition for a weak ``ETag``, which ``If-Match`` never matches), their answers checked
    (``206``, ``Content-Range``'s total, ``ETag``). Read only: an index goes under
    ``index_dir``."""

    def __init__(self, fs: Any, root: str, headers: dict[str, str]) -> None:
        super().__init__(fs, root)
        self.headers = headers

    def url(self, key: str) -> str:
        from urllib.parse import quote

        return f"{self.root}/{quote(key)}"

    def _request(self, method: str, key: str, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        async def call() -> tuple[int, Any, bytes]:
            session = await self.fs.set_session()
            wanted = {**self.headers, "Accept-Encoding": "identity", **headers}
            async with session.request(
                method, self.url(key), headers=wanted, allow_redirects=True
            ) as r:
                body = await r.read() if method == "GET" and r.status in (200, 206) else b""
                return r.status, r.headers, body

        status, answer, body = call_sorted(lambda: _sync(self.fs.loop, call))
        check_status(status)
        return status, answer, body

    def info(self, key: str) -> tuple[int, str | None]:
        _, answer, _ = self._request("HEAD", key, {})
        if "Content-Length" not in answer:
            raise _faults.Permanent("invalid", "the server gives no Content-Length")
        return int(answer["Content-Length"]), _http_version(answer)

    def get(self, key: str, start: int, stop: int, etag: str | None, size: int) -> bytes:
        headers = {"Range": f"bytes={start}-{stop - 1}"}
        if etag is not None and etag.startswith(LAST_MODIFIED):
            headers["If-Unmodified-Since"] = etag[len(LAST_MODIFIED) :]
        elif etag is not None and not etag.startswith("W/"):
            headers["If-Match"] = etag
        # a weak ETag never matches If-Match (compared strongly, RFC 9110): such a request
        # would be refused every time. The answer's ETag is compared below instead.
        try:
            status, answer, body = self._request("GET", key, headers)
        except _faults.Changed:
            if "If-Unmodified-Since" not in headers:
                raise
            raise _faults.Changed(
                f"the server refused If-Unmodified-Since (412): it was modified after its "
                f"Last-Modified {headers['If-Unmodified-Since']}, recorded when it was indexed"
            ) from None
        now = _http_version(answer, like=etag)
        if status == 200 and answer.get("Content-Type", "").lower().startswith("text/html"):
            raise _faults.Permanent(
                "range",
                f"asked for bytes {start}-{stop - 1} of {size}, the server answered {status} "
                f"with an HTML page ({len(body)} bytes, Content-Type {answer['Content-Type']})",
            )
        check_range(status, answer.get("Content-Range"), start, stop, size, etag, now)
        check_answer(answer.get("Content-Range"), now, etag, size)
        check_length(body, stop - start)
        return body

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        status, answer, body = self._request("GET", key, {"Range": f"bytes=-{nbytes}"})
        html = answer.get("Content-Type", "").lower().startswith("text/html")
        if status == 200 and (html or len(body) > nbytes):
            raise _faults.Permanent(
                "range",
                f"asked for its last {nbytes} bytes, the server answered 200 with "
                + (f"an HTML page ({len(body)} bytes)" if html else f"all {len(body)} bytes"),
            )
        total = total_of(answer.get("Content-Range")) if status == 206 else len(body)
        if total is None:
            raise _faults.Permanent("invalid", "the server's answer has no Content-Range")
        if status == 206:
            check_range(status, answer.get("Content-Range"), max(0, total - nbytes), total,
                         total, None, None)  # fmt: skip
        check_length(body, min(nbytes, total))
        return total, _http_version(answer), body

    def whole(self, key: str) -> bytes:
        return self._request("GET", key, {})[2]

    def put(self, key: str, data: bytes) -> None:
        raise _faults.Permanent("read-only", "an http(s) store is read only")

    def delete(self, key: str) -> None:
        raise _faults.Permanent("read-only", "an http(s) store is read only")


def _sync(loop: Any, call: Any) -> Any:
    """``call()`` run on the filesystem's event loop, within the time one request may take."""
    from fsspec.asyn import sync

    limit = _faults.remaining(TIMEOUT_S)
    try:
        return sync(loop, call, timeout=limit)
    except TimeoutError:  # (fsspec's FSTimeoutError is one)
        raise _faults.Transient(f"no complete answer within {limit:.3g} s") from None


def _http_version(answer: Any, like: str | None = None) -> str | None:
    """The version an HTTP answer gives: its ``ETag``, else its ``Last-Modified`` (as
    :data:`LAST_MODIFIED` ``+ date``), else None. ``like``: the recorded version, whose kind is
    taken (a ``Last-Modified`` recorded is compared with a ``Last-Modified`` answered)."""
    modified = answer.get("Last-Modified")
    if like is not None and like.startswith(LAST_MODIFIED):
        return None if modified is None else LAST_MODIFIED + modified
    etag = answer.get("ETag")
    if etag is not None:
        return str(etag)
    return None if modified is None else LAST_MODIFIED + modified


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
            status, answer, body = _sync(fs.loop, call)
        except _faults.Transient:
            raise
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
        now = answer.get("X-Goog-Generation")
        if now is None and "ifGenerationMatch" in params:
            now = etag  # GCS itself held the answer to that generation
        check_range(status, answer.get("Content-Range"), start, stop, size, etag, now)
        total = total_of(answer.get("Content-Range"))
        if total is not None and total != size:
            raise _faults.Changed(f"size {size} → {total} bytes")
        if etag is not None and now is not None and now != etag:
            raise _faults.Changed(f"generation {etag} → {now}")
        check_length(body, stop - start)
        return body

    def tail(self, key: str, nbytes: int) -> tuple[int, str | None, bytes]:
        status, answer, body = self._request(
            "GET", key, {"alt": "media"}, {"Range": f"bytes=-{nbytes}"}
        )
        generation = answer.get("X-Goog-Generation")
        if generation is None:  # a server that does not say: its generation, then those bytes
            size, generation = self.info(key)
            return size, generation, self.get(key, max(0, size - nbytes), size, generation, size)
        total = total_of(answer.get("Content-Range")) if status == 206 else len(body)
        if total is None:
            raise _faults.Permanent("invalid", "the server's answer has no Content-Range")
        check_length(body, min(nbytes, total))
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
