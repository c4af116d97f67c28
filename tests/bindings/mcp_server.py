"""A real MCP server (the official SDK's MCPServer) for the binding tests.

python mcp_server.py stdio            serve on stdin/stdout
python mcp_server.py http PORT        serve streamable HTTP on 127.0.0.1:PORT/mcp

AMPCAP_TEST_MARKS names a directory where tools leave marks: 'started-N'
when a slow call starts, 'cancelled-N' when it is cancelled, 'pid-PID' at
start-up (so a test can count restarts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TypedDict

import anyio
from pydantic import BaseModel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("ampcap-test")
MARKS = Path(os.environ["AMPCAP_TEST_MARKS"]) if os.environ.get("AMPCAP_TEST_MARKS") else None


def mark(name: str) -> None:
    if MARKS is not None:
        (MARKS / name).write_text("")


class Sum(TypedDict):
    total: int


class Scan(TypedDict):
    findings: list[str]
    elapsed: int
    path: str


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers."""
    return {"total": a + b}


@server.tool()
def scan(path: str, min_severity: str = "low") -> Scan:
    """Pretend to scan a path."""
    return {"findings": [f"{path}:{min_severity}"], "elapsed": 7, "path": path}


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Plain text back (no structured content)."""
    return text


@server.tool()
def echo_json(value: int) -> dict:  # type: ignore[type-arg]
    """A dict: JSON text content only, no structured content."""
    return {"value": value}


@server.tool()
def fail(code: str) -> str:
    """Fail with CODE: text."""
    raise ToolError(f"{code}: it failed on purpose")


@server.tool()
async def slow(ms: int, tag: str, ctx: Context) -> Sum:
    """Report progress four times over MS milliseconds."""
    mark(f"started-{tag}")
    try:
        for step in range(1, 5):
            await anyio.sleep(ms / 4000)
            await ctx.report_progress(step, 4, f"step {step}")
    except anyio.get_cancelled_exc_class():
        mark(f"cancelled-{tag}")
        raise
    return {"total": ms}


class Choice(BaseModel):
    answer: str


@server.tool()
async def confirm(question: str, ctx: Context) -> dict:  # type: ignore[type-arg]
    """Ask the client (elicitation/create) and say what came back."""
    result = await ctx.elicit(question, Choice)
    if result.action == "accept":
        return {"action": "accept", "answer": result.data.answer}
    return {"action": result.action}


@server.tool()
async def unknown_total(steps: int, ctx: Context) -> Sum:
    """Progress with no total, STEPS times."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, None, f"step {step} of ?")
        await anyio.sleep(0.01)
    return {"total": steps}


@server.tool()
def crash() -> str:
    """The process dies mid-call."""
    sys.stdout.flush()
    os._exit(3)


if __name__ == "__main__":
    mark(f"pid-{os.getpid()}")
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
