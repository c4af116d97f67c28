"""R23 through the MCP gateway, with the MCP SDK's own client: a host that
cancels a tool call (``notifications/cancelled``) has the gateway cancel the
AMP invoke at the provider, whose capability task stops."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import new_identity  # noqa: E402

import ampcap.mcp  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402


@asynccontextmanager
async def gateway_session(peers: Any) -> AsyncIterator[ClientSession]:
    async with ampcap.mcp.gateway(peers, identity=new_identity()) as server:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(ampcap.mcp.serve_http, server, "127.0.0.1", 0)
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_host_cancelling_a_tool_call_cancels_the_invoke_at_the_provider() -> None:
    started, cancelled = trio.Event(), trio.Event()
    provider = Peer(new_identity())

    @provider.capability("org.example.slow", version="1.0.0")
    async def slow(seconds: float, ctx=None) -> dict:
        started.set()
        try:
            await ctx.sleep(int(seconds * 1000))
        except trio.Cancelled:
            cancelled.set()
            raise
        return {"slept": seconds}

    async with provider.serve("amp://127.0.0.1:0") as served:
        async with gateway_session(served.url) as session:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.call_tool, "org.example.slow", {"seconds": 30})
                with trio.fail_after(10):
                    await started.wait()
                nursery.cancel_scope.cancel()  # the host gives up: notifications/cancelled
            with trio.fail_after(10):
                await cancelled.wait()
            # The gateway still serves calls afterwards.
            result = await session.call_tool("org.example.slow", {"seconds": 0})
            assert result.structured_content == {"slept": 0}


@pytest.mark.trio
async def test_a_deprecated_version_says_so_in_its_tool_description() -> None:
    examples = Path(__file__).parents[2] / "examples" / "manifest.toml"
    async with Peer(new_identity(), manifest=examples).serve("amp://127.0.0.1:0") as served:
        async with gateway_session(served.url) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            text = tools["org.example.greeter.countdown"].description
            assert "Deprecated: org.example.greeter.countdown:0.9.0 is deprecated; use " \
                   "org.example.greeter.countdown:1.0.0; sunset 2027-06-30." in text
            assert "Deprecated" not in (tools["org.example.greeter.greet"].description or "")
