"""An interpreter that imported the heavy modules once and forks a fresh process per script run:
started by tests (tests/helpers/forker.py) whose every case is a script that must end on its own.

``python _forker.py FD MODULE...`` imports each MODULE (``torch``, ``seekdata``), then serves
requests on the socket FD (one end of a ``SOCK_SEQPACKET`` pair): each request is the
script's argv as JSON with one file descriptor attached, the script's stdout and stderr. For each
it forks; the child starts its own session (as ``start_new_session=True`` does), takes that
descriptor as fd 1 and 2 and /dev/null as fd 0, and runs the script as ``__main__`` with that
argv. The child then leaves the way a ``python script.py`` process leaves: this module's top
level returns into the interpreter's own exit, so an exception prints its traceback and gives
status 1, ``sys.exit(n)`` gives n, an unhandled KeyboardInterrupt ends it by SIGINT, atexit hooks
and thread joins run. The server answers ``pid N`` at once and ``status S`` (a
``subprocess.Popen.returncode``: negative for a signal) once the child has ended, then reads the
next request; it ends when the socket closes. A case pays the fork, not ``import torch``.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import socket
import sys


def serve(control: socket.socket) -> list[str]:
    """Fork a child per request; return only in a child, with the argv it must run."""
    # The imported modules' objects go to the collector's permanent generation: a child's
    # collections and its interpreter's end then skip them instead of touching (and so copying)
    # every page they sit on (5 s a child here, against 1 s). The child's own objects, its
    # loader and workers, are collected as in any process.
    gc.freeze()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 65536, 1)
        except ConnectionError:
            data, fds = b"", []
        if not data:
            sys.exit(0)
        argv = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            control.close()
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(fds[0], 1)
            os.dup2(fds[0], 2)
            os.close(null)
            os.close(fds[0])
            return argv
        os.close(fds[0])
        control.send(f"pid {pid}".encode())
        _, status = os.waitpid(pid, 0)
        control.send(f"status {os.waitstatus_to_exitcode(status)}".encode())


if __name__ == "__main__":
    for name in sys.argv[2:]:
        importlib.import_module(name)
    argv = serve(socket.socket(fileno=int(sys.argv[1])))
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")
