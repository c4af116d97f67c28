"""Serving a :class:`~ampcap.mcp.gateway.GatewayServer` over MCP transports.

- :func:`serve_stdio`: newline-delimited JSON-RPC on this process's stdin and
  stdout, the way MCP hosts launch a server as a command. Nothing else may
  write to stdout: logs go to stderr.
- :func:`serve_http`: MCP streamable HTTP at ``http://HOST:PORT/mcp``,
  served by Hypercorn's trio worker (the gateway's AMP side is trio).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from mcp.server.lowlevel import Server

from .gateway import GatewayServer

__all__ = ["serve_stdio", "serve_http", "MCP_PATH"]

MCP_PATH = "/mcp"


# A JSON-RPC line longer than this is dropped (and reported to the SDK as a
# parse error) instead of growing our buffer without end.
MAX_LINE = 64 << 20


async def serve_stdio(server: Server[Any]) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin.

    The SDK's own stdio transport reads and writes through a worker thread
    per line (anyio's file wrapper), which is most of what stdio adds to a
    call. When stdin and stdout are pipes or sockets (as a host starting the
    gateway makes them) they are read and written by trio directly instead,
    from private duplicates: fd 0 then reads /dev/null and fd 1 writes to
    stderr, so stray output cannot corrupt the wire (as the SDK does too).
    A terminal or a file is left to the SDK's transport, since making it
    non-blocking would also change it for whoever shares it."""
    from mcp.server.stdio import stdio_server

    if not (_is_pipe(0) and _is_pipe(1)):
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    try:
        async with trio.lowlevel.FdStream(wire_in) as reader, trio.lowlevel.FdStream(wire_out) as writer:
            async with stdio_server(_Lines(reader), _Writer(writer)) as (read, write):  # type: ignore[arg-type]
                await server.run(read, write, server.create_initialization_options())
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Lines:
    """The text lines of a byte stream, as the SDK's stdio transport reads
    them (``async for line in stdin``)."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._skipping = False  # inside a line longer than MAX_LINE

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                if self._skipping:
                    self._skipping = False
                    return "\x00 line too long\n"  # not JSON: the SDK reports a parse error
                return line.decode("utf-8", "replace")
            if len(self._buffer) > MAX_LINE:
                self._buffer.clear()
                self._skipping = True
            data = await self._stream.receive_some(1 << 16)
            if not data:
                if self._buffer and not self._skipping:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line.decode("utf-8", "replace")
                raise StopAsyncIteration
            self._buffer += data


class _Writer:
    """What the SDK's stdio transport writes to: ``write`` then ``flush``,
    one ``send_all`` per message."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._pending: list[bytes] = []

    async def write(self, text: str) -> None:
        self._pending.append(text.encode("utf-8"))

    async def flush(self) -> None:
        data = b"".join(self._pending)
        self._pending.clear()
        await self._stream.send_all(data)


async def serve_http(server: GatewayServer, host: str = "127.0.0.1", port: int = 0, *,
                     shutdown: Callable[[], Awaitable[Any]] | None = None,
                     task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP streamable HTTP on ``host:port`` (0: any free port) until
    cancelled or ``shutdown()`` returns; ``started`` with the endpoint URL."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    # Starlette is an ASGI app; Hypercorn's type names its own ASGI protocol.
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None  # our logging says what matters; Hypercorn's own lines would go to stderr raw

    started = False
    try:
        async with trio.open_nursery() as nursery:
            bound: list[str] = await nursery.start(functools.partial(serve, app, config,  # type: ignore[arg-type]
                                                                     shutdown_trigger=shutdown))
            started = True
            task_status.started(bound[0].rstrip("/") + MCP_PATH)
    except BaseExceptionGroup as group:
        # Hypercorn's bind error comes out nested in nursery groups, as "Address
        # already in use" without the address; say which address could not be had.
        failed = None if started else _lone(group)
        if not isinstance(failed, OSError):
            raise
        from ..net.transport.url import format_hostport

        raise OSError(failed.errno, f"cannot listen on {format_hostport(host, port)} (MCP HTTP): "
                                    f"{failed.strerror or failed}") from None


def _lone(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception nested groups hold, or None if they hold several."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        if len(leaf.exceptions) != 1:
            return None
        leaf = leaf.exceptions[0]
    return leaf
