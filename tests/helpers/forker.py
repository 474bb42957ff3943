"""Start scripts as real processes without paying ``import torch`` for each: one interpreter
(tests/scripts/_forker.py) imports the heavy modules once and forks a child per run. A run
answers what ``subprocess.Popen(..., stdout=PIPE, stderr=STDOUT, text=True,
start_new_session=True)`` answers, and only that: ``pid``, ``stdout`` (the lines of stdout and
stderr as they come), ``poll``, ``wait``, ``communicate``, ``returncode``. The child is a real
process of its own session that ends through the interpreter's own exit (see _forker.py), so its
status, its output, its workers and its wall time are observed as for a script started afresh.
Several runs may go at once (the ranks of a job).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

from tests.helpers.paths import SCRIPTS


class Forker:
    def __init__(self, *modules: str, env: dict[str, str] | None = None) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "_forker.py"), str(theirs.fileno()), *modules],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()],
            env=env,
            start_new_session=True,
        )
        theirs.close()
        self._ended: dict[int, int] = {}  # pid -> status, of children not yet asked about

    def popen(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        group: int | None = None,
        output: int | None = None,
    ) -> Run:
        """Run ``python argv[0] argv[1:]`` in a forked child, in its own session (GROUP: in
        that process group, 0 a new one), with ENV as its environment (None: the server's),
        its stdout and stderr to the file descriptor OUTPUT (None: a pipe, ``Run.stdout``)."""
        read, write = os.pipe() if output is None else (-1, os.dup(output))
        request = {"argv": list(argv), "env": env, "group": group}
        try:
            socket.send_fds(self._control, [json.dumps(request).encode()], [write])
        finally:
            os.close(write)
        run = Run(self, read)
        run.pid = int(self._message("pid", None))
        return run

    def _message(self, kind: str, deadline: float | None) -> str:
        """The server's next message of KIND (None: no deadline); statuses of other children
        that come first are kept for them."""
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._control], [], [], wait)[0]:
                raise subprocess.TimeoutExpired("forked run", wait or 0.0)
            data = self._control.recv(4096).decode()
            if not data:
                raise RuntimeError("the forking server ended (its stderr is in the test's)")
            got, _, value = data.partition(" ")
            if got == kind:
                return value
            if got != "status":
                raise RuntimeError(f"the forking server answered {data!r}, expected {kind}")
            pid, _, status = value.partition(" ")
            self._ended[int(pid)] = int(status)

    def _status(self, pid: int, deadline: float | None) -> int:
        """Child PID's status once it has ended; TimeoutExpired after DEADLINE."""
        while pid not in self._ended:
            got, _, status = self._message("status", deadline).partition(" ")
            self._ended[int(got)] = int(status)
        return self._ended.pop(pid)

    def close(self) -> None:
        self._control.close()  # the server ends when its socket closes
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()

    def __enter__(self) -> Forker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Run:
    def __init__(self, forker: Forker, fd: int) -> None:
        self._forker = forker
        self._fd = fd  # the read end of its output, -1 when it writes elsewhere
        self._rest = b""  # read from the pipe, not yet handed out
        self.pid = 0
        self.returncode: int | None = None
        self.stdout: Iterator[str] | None = self._lines() if fd >= 0 else None

    def _lines(self) -> Iterator[str]:
        """The output line by line as it comes, until the last writer closes the pipe."""
        while True:
            line, newline, rest = self._rest.partition(b"\n")
            if newline:
                self._rest = rest
                yield (line + newline).decode("utf-8", "replace")
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return
            self._rest += chunk

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self._forker._status(self.pid, time.monotonic())
            except subprocess.TimeoutExpired:
                return None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            self.returncode = self._forker._status(self.pid, deadline)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        """The output not yet read, until the last writer (the child, or a process that
        inherited its output) closed it, then the status; as Popen's, a timeout raises
        TimeoutExpired and a later call goes on reading."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._fd >= 0:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._fd], [], [], wait)[0]:
                raise subprocess.TimeoutExpired("forked run", timeout or 0.0)
            chunk = os.read(self._fd, 65536)
            if not chunk:
                os.close(self._fd)
                self._fd = -1
                break
            self._rest += chunk
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out, self._rest = self._rest, b""
        return out.decode("utf-8", "replace"), None
