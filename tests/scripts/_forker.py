"""An interpreter that imported the heavy modules once and forks a fresh process per script run:
started by tests (tests/helpers/forker.py) whose every case is a script that must end on its own.

``python _forker.py FD MODULE...`` imports each MODULE (``torch``, ``seekdata``), then serves
requests on the socket FD (one end of a ``SOCK_SEQPACKET`` pair): each request is JSON,
``{"argv": [script, ...], "env": {...} or null, "group": null or a process group}``, with one
file descriptor attached, the script's stdout and stderr. For each it forks; the child starts its
own session (as ``start_new_session=True`` does; with ``group``, it joins that process group,
0 a new one, as ``process_group=`` does), takes that descriptor as fd 1 and 2 and /dev/null as
fd 0, takes ``env`` as its environment, and runs the script as ``__main__`` with that argv.
The child then leaves the way a ``python script.py`` process leaves: this module's top level
returns into the interpreter's own exit, so an exception prints its traceback and gives
status 1, ``sys.exit(n)`` gives n, an unhandled KeyboardInterrupt ends it by SIGINT, atexit hooks
and thread joins run. The server answers ``pid N`` at once and ``status N S`` (a
``subprocess.Popen.returncode``: negative for a signal) once child N has ended; several children
may run at once. It ends when the socket closes. A case pays the fork, not ``import torch``.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import select
import socket
import sys


def serve(control: socket.socket) -> dict:
    """Fork a child per request; return only in a child, with the request it must run."""
    # The imported modules' objects go to the collector's permanent generation: a child's
    # collections and its interpreter's end then skip them instead of touching (and so copying)
    # every page they sit on (5 s a child here, against 1 s). The child's own objects, its
    # loader and workers, are collected as in any process.
    gc.freeze()
    children: dict[int, int] = {}  # pidfd -> pid, of the children still running
    while True:
        ready, _, _ = select.select([control, *children], [], [])
        for fd in ready:
            if fd in children:  # a child ended
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                control.send(f"status {pid} {os.waitstatus_to_exitcode(status)}".encode())
                continue
            try:
                data, fds, _, _ = socket.recv_fds(control, 1 << 20, 1)
            except ConnectionError:
                data, fds = b"", []
            if not data:
                sys.exit(0)
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                control.close()
                for other in children:
                    os.close(other)
                _become(request, fds[0])
                return request
            if request.get("group") is not None:  # also here: the group exists once answered
                with contextlib.suppress(OSError):
                    os.setpgid(pid, request["group"] or pid)
            os.close(fds[0])
            children[os.pidfd_open(pid)] = pid
            control.send(f"pid {pid}".encode())


def _become(request: dict, output: int) -> None:
    """In the child: its own session (or the process group asked for), OUTPUT as fd 1 and 2,
    /dev/null as fd 0, the environment asked for (what reads it after the imports sees it)."""
    if request.get("group") is None:
        os.setsid()
    else:
        with contextlib.suppress(OSError):
            os.setpgid(0, request["group"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(null)
    os.close(output)
    if request.get("env") is not None:
        os.environ.clear()
        os.environ.update(request["env"])


if __name__ == "__main__":
    for name in sys.argv[2:]:
        importlib.import_module(name)
    argv = serve(socket.socket(fileno=int(sys.argv[1])))["argv"]
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")
