"""The MCP server tools/bench_bindings.py calls (the official SDK, stdio)."""

from typing import TypedDict

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


class Sum(TypedDict):
    total: int


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers."""
    return {"total": a + b}


if __name__ == "__main__":
    server.run("stdio")
