"""The gateway that cannot serve, telling the MCP host why.

An MCP host starts ``ampcap mcp`` as a command and hides its stderr: a
gateway that exits at once (a usage mistake, an unreadable key file, a peer
that has the gateway's own DID) shows only as "connection closed". So when
``ampcap mcp`` cannot serve on stdio, it still answers the MCP session: the
handshake succeeds, with the reason as the server's ``instructions``, and
every ``tools/list`` and ``tools/call`` is a JSON-RPC error whose message is
the reason, the same line stderr gets. The process exits (status 2 or 1)
when the host closes stdin.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from .. import __version__

__all__ = ["FailedServer", "serve_failure_stdio", "CANNOT_SERVE"]

# JSON-RPC's "server error" range (-32000..-32099) is the implementation's
# own: a gateway that cannot serve is one.
CANNOT_SERVE = -32001


class FailedServer(Server[Any]):
    """An MCP server whose every request fails with ``reason``."""

    def __init__(self, reason: str, name: str = "ampcap") -> None:
        self.reason = reason
        super().__init__(name, version=__version__, instructions=f"ampcap mcp cannot serve: {reason}",
                         on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self.middleware = []

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        raise MCPError(CANNOT_SERVE, f"ampcap mcp cannot serve: {self.reason}")

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: Any) -> types.CallToolResult:
        raise MCPError(CANNOT_SERVE, f"ampcap mcp cannot serve: {self.reason}")


async def serve_failure_stdio(reason: str) -> None:
    """Answer the host on stdin/stdout with ``reason`` until it closes stdin."""
    from .gateway_serve import serve_stdio

    await serve_stdio(FailedServer(reason))
