"""An MCP server (the SDK's MCPServer) whose tools declare annotations and
output schemas, for the MCP -> AMP -> MCP round trip (tests/mcp/test_host_path.py)."""

from typing import TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("clock")


class Now(TypedDict):
    timezone: str
    datetime: str


@server.tool(annotations=ToolAnnotations(title="Current time", readOnlyHint=True, openWorldHint=False))
def get_current_time(timezone: str) -> Now:
    """The current time in a timezone."""
    if timezone == "Nowhere/Land":
        raise ToolError(f"Invalid timezone: {timezone}")
    return {"timezone": timezone, "datetime": "2026-01-01T00:00:00"}


@server.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
def wipe(path: str) -> str:
    """Delete everything under a path (a pretend destructive tool)."""
    return f"wiped {path}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def note(text: str) -> str:
    """Add a note (additive, not destructive)."""
    return text


if __name__ == "__main__":
    server.run("stdio")
