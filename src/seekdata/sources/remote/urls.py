"""Remote URLs: which ones are remote, and the store and key each one names.

Accepted forms (the object's key follows the bucket, container or host):

- ``s3://bucket/key`` (``s3a://`` too): S3 and S3-compatible stores (MinIO, R2, moto) — an
  endpoint other than AWS's comes from ``storage_options={"endpoint_url": ...}`` or the
  environment (``AWS_ENDPOINT_URL``);
- ``gs://bucket/key`` (``gcs://`` too): Google Cloud Storage;
- ``az://container/key`` (``abfs://``, ``abfss://``, ``azure://``, ``adl://``): Azure Blob
  Storage, the account from ``storage_options`` or ``AZURE_STORAGE_ACCOUNT_NAME``;
- ``http://host/path``, ``https://host/path``: any server that honours ``Range``;
- ``hf://datasets/org/name/path`` (``hf://datasets/org/name@revision/path``, and
  ``hf://org/name/path`` for a model repository): a file of a Hugging Face Hub repository,
  read from ``{endpoint}/datasets/org/name/resolve/{revision}/path`` (endpoint:
  ``storage_options={"endpoint": ...}``, else ``HF_ENDPOINT``, else https://huggingface.co;
  revision: ``main`` unless given, percent-encoded when it holds a slash, as in
  ``@refs%2Fconvert%2Fparquet``).

A URL with a query string, a fragment or a user name is refused: a signed URL or a password
would otherwise end up in indexes, error messages and sample dicts. Credentials go in
``storage_options=`` or the back-end's usual places, never in the URL.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

#: ``scheme:`` at the start of a URL: two characters at least, so ``C:\\data`` is a path
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):")
#: URL scheme → the kind of store that serves it
SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "az": "az",
    "abfs": "az",
    "abfss": "az",
    "azure": "az",
    "adl": "az",
    "http": "http",
    "https": "http",
    "hf": "hf",
}
HF_ENDPOINT = "https://huggingface.co"
_HF_KINDS = ("datasets", "spaces")


def url_scheme(url: object) -> str | None:
    """The lower-cased scheme of ``url`` (``"pipe"`` of ``pipe:cmd``, ``"file"``, ``"s3"``),
    None for a path: the one scheme parser of every file-backed source."""
    if not isinstance(url, str):
        return None
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else None


def scheme_of(url: object) -> str | None:
    """The lower-cased scheme of a ``scheme://`` URL, None for anything else."""
    scheme = url_scheme(url)
    if scheme is None or not str(url)[len(scheme) + 1 :].startswith("//"):
        return None
    return scheme


def is_remote(url: object) -> bool:
    """Whether ``url`` names an object in a store seekdata reads by byte range."""
    return scheme_of(url) in SCHEMES


@dataclass(frozen=True)
class Location:
    """Where one remote object lives."""

    url: str  #: as given
    kind: str  #: "s3", "gs", "az", "http" or "hf"
    root: str  #: the store's URL (``s3://bucket``, ``https://host``, a repository's resolve URL)
    key: str  #: the object's path inside the store

    def sibling(self, suffix: str) -> Location:
        """The object whose key is this one's plus ``suffix`` (where an index lives)."""
        return Location(self.url + suffix, self.kind, self.root, self.key + suffix)


def locate(url: str, options: dict[str, Any] | None = None) -> Location:
    """The store and key of a remote ``url``; ``ValueError`` for a URL it cannot name."""
    scheme = scheme_of(url)
    kind = SCHEMES.get(scheme or "")
    if kind is None:
        raise ValueError(
            f"{url}: not a remote URL; use one of {', '.join(s + '://' for s in sorted(SCHEMES))}"
        )
    parts = urlsplit(url)
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError(
            f"{_redacted(url)}: a remote URL must not carry a query string or fragment (a signed "
            "URL would be kept in indexes, messages and samples); pass the plain object URL, "
            "and credentials through storage_options= or the environment"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"{_redacted(url)}: a remote URL must not carry a user name or password; pass "
            "credentials through storage_options= or the environment"
        )
    if kind == "hf":
        return _hf(url, parts.netloc + parts.path, options or {})
    bucket, path = parts.netloc, parts.path.lstrip("/")
    if not bucket or not path or path.endswith("/"):
        what = "host" if kind == "http" else "bucket"
        given = (
            f"it names no {what}"
            if not bucket
            else f"it names {'only' if not path else 'a folder of'} the {what} {bucket!r}"
        )
        raise ValueError(
            f"{url}: a remote URL must name a {what} and an object in it ({given}), e.g. "
            f"{scheme}://{bucket or ('example.com' if kind == 'http' else 'bucket')}"
            "/data/train-0000.tar; for many objects, name them with a brace pattern "
            "(.../train-{0000..0099}.tar) or pass a list of URLs"
        )
    root = f"{parts.scheme.lower()}://{bucket}"
    return Location(url, kind, root, unquote(path) if kind == "http" else path)


def _hf(url: str, rest: str, options: dict[str, Any]) -> Location:
    parts = rest.split("/")
    prefix = ""
    if parts and parts[0] in _HF_KINDS:
        prefix, parts = parts[0] + "/", parts[1:]
    if len(parts) < 3 or not all(parts):
        raise ValueError(
            f"{url}: an hf:// URL names a repository and a file in it, e.g. "
            "hf://datasets/org/name/data/train-00000-of-00002.parquet "
            "(hf://datasets/org/name@revision/... for another revision)"
        )
    org, name, path = parts[0], parts[1], "/".join(parts[2:])
    revision = "main"
    if "@" in name:
        name, revision = name.split("@", 1)
        revision = unquote(revision)
    endpoint = str(options.get("endpoint") or os.environ.get("HF_ENDPOINT") or HF_ENDPOINT)
    root = f"{endpoint.rstrip('/')}/{prefix}{org}/{name}/resolve/{quote(revision, safe='')}"
    return Location(url, "hf", root, path)


def _redacted(url: str) -> str:
    """``url`` without what may be a secret: its query, fragment and user information."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else "")
