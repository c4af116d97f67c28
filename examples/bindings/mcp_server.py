"""A tiny MCP server (the official SDK's MCPServer) for examples/bindings/mcp.toml.

Run by ampcap itself over stdio: ampcap serve --manifest examples/bindings/mcp.toml
"""

from typing import TypedDict

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("words")


class Counted(TypedDict):
    count: int
    longest: str


@server.tool()
async def count_words(text: str, ctx: Context) -> Counted:
    """Count the words of a text, reporting progress as it goes."""
    words = text.split()
    for done in range(1, 4):
        await anyio.sleep(0.01)
        await ctx.report_progress(done, 3, f"pass {done} of 3")
    return {"count": len(words), "longest": max(words, key=len, default="")}


if __name__ == "__main__":
    server.run("stdio")
