"""A counting, fault-injecting HTTP/1.1 proxy for the remote tests and benchmarks.

Test infrastructure, not seekdata code: it sits between a client and a real server (moto's S3
server, uvicorn) on 127.0.0.1, forwards every request on a fresh upstream connection, and
counts what it forwards (requests, response body bytes, and each request's method, path and
``Range``). Faults are decided by the request's number, never by time or chance, so a run is
reproducible: with ``--every N`` the ``k``-th proxied request (k = 1, 2, ...) gets

- ``k % N == 5 % N``: its connection dropped before any response (a reset);
- ``k % N == 9 % N``: a ``503 SlowDown`` (S3's throttling answer) instead of the response;
- ``k % N == 13 % N``: the response's headers and half its body, then the connection closed
  (a truncated body);
- ``k % N == 17 % N``: the response delayed by ``--delay`` seconds.

(With ``N = 20``: one request in 20 of each kind, all of them within the first 17.)

Control endpoints (never counted): ``GET /__proxy__/stats`` (JSON), ``POST /__proxy__/reset``
(zero the counters and the log), ``POST /__proxy__/faults?every=N`` (0: none).

Usage: ``python src/seekdata/_servers/fault_proxy.py --upstream 127.0.0.1:PORT --port PORT
[--every 20]``; it prints ``READY <port>`` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from urllib.parse import parse_qs, urlsplit

_SLOWDOWN = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class Proxy:
    def __init__(self, upstream: tuple[str, int], every: int, delay: float) -> None:
        self.upstream, self.every, self.delay = upstream, every, delay
        self.in_flight = 0  # requests sent upstream, not yet answered (their log has no bytes)
        self.reset()

    def reset(self) -> None:
        self.count = 0  # proxied requests, faults included
        self.body_bytes = 0  # response body bytes sent to clients
        self.faults = {"drop": 0, "slowdown": 0, "truncate": 0, "delay": 0}
        self.log: list[dict[str, object]] = []

    def fault(self, k: int) -> str | None:
        n = self.every
        if n <= 0:
            return None
        for name, residue in (("drop", 5), ("slowdown", 9), ("truncate", 13), ("delay", 17)):
            if k % n == residue % n:
                return name
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_message(reader, request=True, writer=writer)
                if request is None:
                    break
                head, body = request
                keep = await self.answer(head, body, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def answer(self, head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        line, headers = parse_head(head)
        method, target = line.split(b" ")[:2]
        path = target.decode("latin-1")
        if path.startswith("/__proxy__/"):
            return await self.control(method.decode(), path, writer)
        self.count += 1
        k = self.count
        fault = self.fault(k)
        entry = {
            "n": k,
            "method": method.decode(),
            "path": urlsplit(path).path,
            "range": headers.get(b"range", b"").decode(),
            "fault": fault,
        }
        self.log.append(entry)
        if fault == "drop":
            self.faults["drop"] += 1
            return False  # closed without a word: the client sees a reset / empty reply
        if fault == "slowdown":
            self.faults["slowdown"] += 1
            writer.write(
                b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(_SLOWDOWN), _SLOWDOWN)
            )
            await writer.drain()
            return True
        self.in_flight += 1
        try:
            status_head, status_body = await self.forward(head, body)
        finally:
            self.in_flight -= 1
        entry["bytes"] = len(status_body)
        if fault == "delay":
            self.faults["delay"] += 1
            await asyncio.sleep(self.delay)
        if fault == "truncate" and len(status_body) >= 2:
            self.faults["truncate"] += 1
            writer.write(status_head + status_body[: len(status_body) // 2])
            await writer.drain()
            self.body_bytes += len(status_body) // 2
            return False
        writer.write(status_head + status_body)
        await writer.drain()
        self.body_bytes += len(status_body)
        return True

    async def forward(self, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        host, port = self.upstream
        reader, writer = await asyncio.open_connection(host, port)
        try:
            line = head.split(b"\r\n", 1)[0]
            kept = [
                h
                for h in head.split(b"\r\n")[1:]
                if h and h.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")
            ]
            writer.write(b"\r\n".join([line, *kept, b"Connection: close", b"", b""]) + body)
            await writer.drain()
            response = await read_message(reader, request=False, method=line.split(b" ")[0])
            if response is None:
                raise ConnectionError("upstream closed without a response")
            rhead, rbody = response
            rline, rheaders = parse_head(rhead)
            out = [rline]
            for h in rhead.split(b"\r\n")[1:]:
                name = h.split(b":", 1)[0].strip().lower()
                if h and name not in (b"connection", b"keep-alive", b"transfer-encoding"):
                    out.append(h)
            if b"content-length" not in rheaders:
                out.append(b"Content-Length: %d" % len(rbody))
            return b"\r\n".join([*out, b"", b""]), rbody
        finally:
            writer.close()

    async def control(self, method: str, path: str, writer: asyncio.StreamWriter) -> bool:
        url = urlsplit(path)
        if url.path == "/__proxy__/reset":
            self.reset()
        elif url.path == "/__proxy__/faults":
            query = parse_qs(url.query)
            self.every = int(query.get("every", ["0"])[0])
        payload = json.dumps(
            {
                "requests": self.count,
                "body_bytes": self.body_bytes,
                "faults": self.faults,
                "every": self.every,
                "in_flight": self.in_flight,
                "log": self.log,
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )
        await writer.drain()
        return True


def parse_head(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    lines = head.split(b"\r\n")
    headers = {}
    for h in lines[1:]:
        if b":" in h:
            name, value = h.split(b":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def read_message(
    reader: asyncio.StreamReader,
    *,
    request: bool,
    method: bytes = b"GET",
    writer: asyncio.StreamWriter | None = None,
) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 message: its head (without the blank line) and its decoded body. A request
    that expects ``100 Continue`` gets it from here (and loses the header)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise
        return None
    head = head[:-4]
    line, headers = parse_head(head)
    if request and headers.get(b"expect", b"").lower() == b"100-continue" and writer is not None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        head = b"\r\n".join(h for h in head.split(b"\r\n") if not h.lower().startswith(b"expect:"))
    if not request and (method == b"HEAD" or int(line.split(b" ")[1]) in (204, 304)):
        return head, b""  # no body, whatever Content-Length says
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunks.append(await reader.readexactly(size))
            await reader.readuntil(b"\r\n")
            if size == 0:
                break
        head = b"\r\n".join(
            h for h in head.split(b"\r\n") if not h.lower().startswith(b"transfer-encoding")
        )
        body = b"".join(chunks)
        if request:
            head += b"\r\nContent-Length: %d" % len(body)
        return head, body
    if b"content-length" in headers:
        return head, await reader.readexactly(int(headers[b"content-length"]))
    if request:
        return head, b""
    return head, await reader.read()  # until the upstream closes (we sent Connection: close)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the real server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--every", type=int, default=0, help="fault period (0: none)")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds a delayed reply waits")
    args = parser.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    proxy = Proxy((host, int(port)), args.every, args.delay)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.port)
    print("READY", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
