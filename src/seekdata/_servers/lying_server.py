"""An HTTP server that misbehaves on request: the remote tests' own, for servers that lie.

Test infrastructure, not seekdata code. It serves the files of a folder; the first part of a
request's path names how it answers, the rest is the file (``/<mode>/<path in the folder>``):

- ``honest``: ``206`` for a ``Range``, an ``ETag`` (of size and mtime) and ``Last-Modified``,
  ``If-Match`` and ``If-Unmodified-Since`` answered with ``412`` when they fail;
- ``shift``: as ``honest``, but ``bytes=a-b`` is answered with the same number of bytes from
  :data:`SHIFT` bytes earlier, labelled honestly (``Content-Range: bytes a-64 … b-64/total``);
- ``html``: every request (``HEAD`` too) gets ``200`` and the same HTML error page, no
  ``ETag``, no ``Last-Modified`` — a captive portal, a login page;
- ``lastmod``: as ``honest`` without ``ETag``: ``Last-Modified`` alone tells versions apart;
- ``bare``: as ``honest`` with neither ``ETag`` nor ``Last-Modified``;
- ``norange``: ignores ``Range``: ``200`` and the whole file, with its ``ETag``;
- ``slow``: the headers of an honest answer, then its body a byte every 0.2 s;
- ``weak``: as ``honest`` with a weak ``ETag`` (``W/"..."``, as nginx and CDNs give a
  compressed or generated answer), and ``If-Match`` compared strongly, as RFC 9110 says: a
  weak tag never matches, so any ``If-Match`` gets ``412``.

Control: ``GET /__count__`` gives the requests answered so far per mode (JSON), ``POST
/__reset__`` zeroes them. Usage: ``python src/seekdata/_servers/lying_server.py DIR``; prints
``READY <port>`` once it listens on 127.0.0.1.
"""

from __future__ import annotations

import email.utils
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SHIFT = 64
HTML = (
    b"<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Sign in to continue"
    b"</h1><p>Your session has expired. Please sign in again.   </p></body></html>\n"
)
MODES = ("honest", "shift", "html", "lastmod", "bare", "norange", "slow", "weak")
_counts: dict[str, int] = {}
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.answer(body=True)

    def do_HEAD(self) -> None:
        self.answer(body=False)

    def do_POST(self) -> None:
        if self.path == "/__reset__":
            with _lock:
                _counts.clear()
            self.send(200, {"Content-Type": "application/json"}, b"{}", True)
        else:
            self.send(405, {}, b"", True)

    def send(self, status: int, headers: dict[str, str], data: bytes, body: bool) -> None:
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def answer(self, body: bool) -> None:
        if self.path == "/__count__":
            with _lock:
                data = json.dumps(_counts).encode()
            self.send(200, {"Content-Type": "application/json"}, data, body)
            return
        mode, _, rest = self.path.lstrip("/").partition("/")
        if mode not in MODES:
            self.send(404, {}, b"no such mode", body)
            return
        with _lock:
            _counts[mode] = _counts.get(mode, 0) + 1
        if mode == "html":
            self.send(200, {"Content-Type": "text/html; charset=utf-8"}, HTML, body)
            return
        path = os.path.join(self.root, rest)
        try:
            with open(path, "rb") as f:
                data = f.read()
                st = os.fstat(f.fileno())
        except OSError:
            self.send(404, {}, b"not found", body)
            return
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        if mode == "weak":
            etag = "W/" + etag
        modified = email.utils.formatdate(st.st_mtime, usegmt=True)
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        if mode not in ("lastmod", "bare"):
            headers["ETag"] = etag
        if mode != "bare":
            headers["Last-Modified"] = modified
        wanted = self.headers.get("If-Match")
        weak = etag.startswith("W/")  # strong comparison: a weak tag matches nothing
        if wanted is not None and "ETag" in headers and (wanted != etag or weak):
            self.send(412, {}, b"precondition failed", body)
            return
        since = self.headers.get("If-Unmodified-Since")
        if since is not None and mode != "bare":
            when = email.utils.parsedate_to_datetime(since).timestamp()
            if int(st.st_mtime) > int(when):
                self.send(412, {}, b"precondition failed", body)
                return
        asked = self.headers.get("Range")
        if asked is None or mode == "norange":
            self.send(200, headers, data, body)
            return
        start, stop = _range(asked, len(data))
        if mode == "shift":  # as many bytes, from SHIFT earlier
            start, stop = max(0, start - SHIFT), max(0, start - SHIFT) + (stop - start)
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
        if mode != "slow" or not body:
            self.send(206, headers, data[start:stop], body)
            return
        self.send_response(206)
        for name, value in {**headers, "Content-Length": str(stop - start)}.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for k in range(start, stop):
                self.wfile.write(data[k : k + 1])
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            self.close_connection = True


def _range(header: str, size: int) -> tuple[int, int]:
    """``[start, stop)`` of a ``bytes=a-b`` or ``bytes=-n`` header."""
    spec = header.split("=", 1)[1].split(",")[0].strip()
    a, _, b = spec.partition("-")
    if not a:
        return max(0, size - int(b)), size
    return int(a), min(size, int(b) + 1 if b else size)


def main() -> None:
    Handler.root = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print("READY", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
