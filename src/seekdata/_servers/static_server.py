"""Serve a folder over HTTP with uvicorn and starlette's ``StaticFiles`` (which honours ``Range``).

Test infrastructure: ``python src/seekdata/_servers/static_server.py DIR --port PORT``; prints
``READY <port>`` on stdout once it listens. Both packages are the real ones from PyPI (the
``test`` extra).
"""

from __future__ import annotations

import argparse
import asyncio

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    # mounted in an application, so that a missing file is a 404 (a bare StaticFiles's error
    # would reach uvicorn unhandled: a 500)
    app = Starlette(routes=[Mount("/", app=StaticFiles(directory=args.directory))])
    # uvicorn binds the port itself: sockets handed to it lose TCP_NODELAY, and every reply on
    # a kept-alive connection then waits 40 ms for a delayed ACK
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        print("READY", port, flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
