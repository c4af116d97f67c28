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
async def gateway_session(peers: Any, **session_options: Any) -> AsyncIterator[ClientSession]:
    # Dotted tool names (the default since issue 36 is underscores): these tests are about steering.
    async with ampcap.mcp.gateway(peers, identity=new_identity(), underscore=False) as server:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(ampcap.mcp.serve_http, server, "127.0.0.1", 0)
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write, **session_options) as session:
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


def asking_peer() -> Peer:
    provider = Peer(new_identity())

    @provider.capability("org.example.deploy", version="1.0.0")
    async def deploy(ctx=None) -> dict:
        answer = await ctx.ask("Deploy to production?", options=["yes", "no"], timeout_ms=10_000)
        return {"answer": answer}

    @provider.capability("org.example.steps", version="1.0.0")
    async def steps(ctx=None) -> dict:
        for i in range(3):
            await ctx.progress(None, f"step {i + 1}")  # no percentage: PROCESSING
        await ctx.progress(100, "done")
        return {"steps": 3}

    return provider


@pytest.mark.trio
async def test_input_required_becomes_an_elicitation_to_the_host() -> None:
    import mcp.types as types

    asked: list = []

    async def elicit(context: Any, params: Any) -> Any:
        asked.append((params.message, params.requested_schema))
        return types.ElicitResult(action="accept", content={"answer": "yes"})

    async with asking_peer().serve("amp://127.0.0.1:0") as served:
        async with gateway_session(served.url, elicitation_callback=elicit) as session:
            result = await session.call_tool("org.example.deploy", {})
            assert result.structured_content == {"answer": "yes"}
            ((message, schema),) = asked
            assert message == "Deploy to production?"
            assert schema["properties"]["answer"] == {"type": "string", "enum": ["yes", "no"]}
        # A host that declines, and one without elicitation: the question is declined (4001).
        async def decline(context: Any, params: Any) -> Any:
            return types.ElicitResult(action="decline")

        async with gateway_session(served.url, elicitation_callback=decline) as session:
            result = await session.call_tool("org.example.deploy", {})
            assert result.is_error and "4001" in result.content[0].text
        async with gateway_session(served.url) as session:
            result = await session.call_tool("org.example.deploy", {})
            assert result.is_error and "declined" in result.content[0].text


@pytest.mark.trio
async def test_progress_without_a_total_reaches_the_host() -> None:
    async with asking_peer().serve("amp://127.0.0.1:0") as served:
        async with gateway_session(served.url) as session:
            seen: list = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append((value, total, message))

            result = await session.call_tool("org.example.steps", {}, progress_callback=progress)
            assert result.structured_content == {"steps": 3}
            assert seen == [(1.0, None, "step 1"), (2.0, None, "step 2"), (3.0, None, "step 3"),
                            (100.0, 100.0, "done")]
