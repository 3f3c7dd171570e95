"""In-sandbox TCP -> unix-socket forwarder (stdlib only; runs on the sandbox's ``python3``).

Listens on ``127.0.0.1:PORT`` inside the sandbox's own network namespace and relays every
connection, byte for byte in both directions, to the model socket mounted at
``/run/clawrl/model.sock``. Being a byte relay it is protocol-agnostic: HTTP/1.1 keep-alive,
chunked and server-sent-event streaming, pipelining and many concurrent connections all pass
through unchanged; each connection gets its own socket connection and half-closes are
propagated. Harnesses then use ``http://127.0.0.1:8000/s/<session>/v1`` as their base URL.

Usage (started for you by :class:`clawrl.sandbox.Sandbox` when the spec has a model socket)::

    python3 forwarder.py [--port 8000] [--socket /run/clawrl/model.sock] [--ready-file F]

Keep this file free of third-party imports and compatible with Python >= 3.8: it runs with
whatever ``python3`` the sandbox has (Debian's ``/usr/bin/python3`` in the default rootfs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import time

BUF = 65536
CONNECT_RETRY_S = 10.0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(BUF)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _connect_unix(
    path: str,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a unix socket, retrying while the server's accept queue is full.

    A non-blocking unix-socket connect fails with EAGAIN when the listener's backlog is full;
    asyncio's own connect would mistake that for "in progress" and hand back an unconnected
    socket, so connect by hand and retry (exponential back-off, up to CONNECT_RETRY_S).
    """
    delay, deadline = 0.005, time.monotonic() + CONNECT_RETRY_S
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except (BlockingIOError, InterruptedError, ConnectionRefusedError, FileNotFoundError):
            s.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)
            continue
        except OSError:
            s.close()
            raise
        return await asyncio.open_unix_connection(sock=s)


async def _handle(
    client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, sock_path: str
) -> None:
    try:
        up_r, up_w = await _connect_unix(sock_path)
    except OSError as e:
        sys.stderr.write(f"forwarder: cannot connect to {sock_path}: {e}\n")
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))
    finally:
        for w in (up_w, client_w):
            with contextlib.suppress(Exception):
                w.close()


async def _main(args: argparse.Namespace) -> None:
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, args.socket), args.host, args.port, backlog=256
    )
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, args.ready_file)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="TCP -> unix socket forwarder")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--socket", default="/run/clawrl/model.sock")
    p.add_argument("--ready-file", default="")
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
