"""Serving a :class:`~ampcap.mcp.gateway.GatewayServer` over MCP transports.

- :func:`serve_stdio`: newline-delimited JSON-RPC on this process's stdin and
  stdout, the way MCP hosts launch a server as a command. Nothing else may
  write to stdout: logs go to stderr.
- :func:`serve_http`: MCP streamable HTTP at ``http://HOST:PORT/mcp``,
  served by Hypercorn's trio worker (the gateway's AMP side is trio).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .gateway import GatewayServer

__all__ = ["serve_stdio", "serve_http", "MCP_PATH"]

MCP_PATH = "/mcp"


async def serve_stdio(server: GatewayServer) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


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

    async with trio.open_nursery() as nursery:
        bound: list[str] = await nursery.start(functools.partial(serve, app, config,  # type: ignore[arg-type]
                                                                 shutdown_trigger=shutdown))
        task_status.started(bound[0].rstrip("/") + MCP_PATH)
