"""The gateway over MCP streamable HTTP: ``ampcap mcp --http`` as a process,
and :func:`ampcap.mcp.gateway` embedded in a Python program (a Python-API
peer whose capabilities change, a peer with 1,000 capabilities)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

import mcp.types as types  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import new_identity, self_signed_cert, serve_process  # noqa: E402

import ampcap.mcp  # noqa: E402
from ampcap.caps.demo import demo_manifest  # noqa: E402
from ampcap.mcp.gateway_links import DialOptions  # noqa: E402
from ampcap.net.api.peer import Peer  # noqa: E402
from ampcap.net.transport.tls import client_context, server_context  # noqa: E402
from ampcap.peer.outbound import Outbound  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

PYTHON = sys.executable


def _text(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


@asynccontextmanager
async def http_session(url: str, on_message: Any = None) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            yield session


def test_ampcap_mcp_http_on_a_busy_port_names_the_address(tmp_path: Path) -> None:
    """Issue 38 item 12: it said only "Address already in use"."""
    with serve_process(tmp_path) as served, socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "gw"))
        done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "mcp", "--http", address, served.url],
                              capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == f"ampcap mcp: cannot listen on {address} (MCP HTTP): Address already in use"


@pytest.mark.trio
async def test_ampcap_mcp_http_process(tmp_path: Path) -> None:
    with serve_process(tmp_path) as served:
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "gw"), PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([PYTHON, "-m", "ampcap.cli.main", "mcp", "--http", "127.0.0.1:0",
                                 "--underscore-names", served.url], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            assert proc.stdout is not None
            line = await trio.to_thread.run_sync(proc.stdout.readline)
            word, url = line.split()
            assert word == "mcp" and url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
            async with http_session(url) as session:
                names = {tool.name for tool in (await session.list_tools()).tools}
                assert "org_ampcap_demo_echo" in names and "org_ampcap_demo_math_add" in names
                result = await session.call_tool("org_ampcap_demo_math_add", {"a": 2, "b": 3})
                assert result.structured_content == {"sum": 5}
                result = await session.call_tool("org_ampcap_demo_fail", {})
                assert result.is_error and _text(result).startswith("5001 INTERNAL_ERROR: ")
                seen: list[float] = []

                async def progress(value: float, total: float | None, message: str | None) -> None:
                    seen.append(value)

                result = await session.call_tool("org_ampcap_demo_sleep", {"ms": 300}, progress_callback=progress)
                assert result.structured_content == {"slept_ms": 300} and seen and seen[-1] == 100.0
        finally:
            proc.terminate()
            proc.wait(30)
            assert proc.stdout is not None
            proc.stdout.close()


@asynccontextmanager
async def embedded(peers: Any, **options: Any) -> AsyncIterator[tuple[str, Any]]:
    """``ampcap.mcp.gateway(peers)`` served over HTTP in this process: (url, server)."""
    options.setdefault("underscore", False)  # these tests name the tools by their capability names
    async with ampcap.mcp.gateway(peers, identity=new_identity(), **options) as server:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(ampcap.mcp.serve_http, server, "127.0.0.1", 0)
            yield url, server
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_embedded_gateway_over_a_remote_reacts_to_an_unasked_declare() -> None:
    provider = Peer(new_identity())

    @provider.capability("org.example.greet", version="1.0.0")
    async def greet(name: str) -> dict[str, str]:
        return {"greeting": f"Hello, {name}."}

    changed = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with provider.serve("amp://127.0.0.1:0") as server:
        async with Peer(new_identity()).connect(server.url) as remote:
            # poll_s is long: only the unasked CAP_DECLARE can explain a change.
            async with embedded(remote, poll_s=600) as (url, gateway_server):
                async with http_session(url, on_message) as session:
                    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
                    assert set(tools) == {"org.example.greet"}
                    # Not in a local bundle: the peer handed it out (by hash).
                    assert tools["org.example.greet"].input_schema["properties"]["name"]["type"] == "string"
                    result = await session.call_tool("org.example.greet", {"name": "Ada"})
                    assert result.structured_content == {"greeting": "Hello, Ada."}
                    result = await session.call_tool("org.example.greet", {"name": 7})  # the peer's own check answers
                    assert result.is_error and _text(result).startswith("4004 SCHEMA_VIOLATION: ")

                    # The provider gains a capability and announces it unasked.
                    added = demo_manifest().capabilities[-1]
                    server.daemon.catalog.registry.add(added)
                    (theirs,) = server.remotes()
                    theirs._link.driver.send_nowait(Outbound(typ=int(MessageType.CAP_DECLARE),
                                                             body={"capabilities": [added.descriptor.to_wire()]}))
                    with trio.fail_after(5):
                        await changed.wait()
                    names = {tool.name for tool in (await session.list_tools()).tools}
                    assert names == {"org.example.greet", added.name}
                # The client went away (its session deleted): no longer told of changes.
                with trio.fail_after(5):
                    while gateway_server.gateway._sessions:
                        await trio.sleep(0.05)


@pytest.mark.trio
async def test_a_thousand_capabilities_list_in_under_a_second() -> None:
    provider = Peer(new_identity())
    for i in range(1000):
        provider.capability(f"org.example.many.cap{i:04d}", version="1.0.0",
                            schema={"type": "object", "properties": {"x": {"type": "integer"}}})(lambda x=0: {"x": x})
    async with provider.serve("amp://127.0.0.1:0") as server:
        async with embedded(server.url) as (url, _), http_session(url) as session:
            started = time.monotonic()
            listed = await session.list_tools()
            elapsed = time.monotonic() - started
            assert len(listed.tools) == 1000 and listed.next_cursor is None
            assert elapsed < 1.0, f"tools/list took {elapsed:.3f} s"
            result = await session.call_tool("org.example.many.cap0999", {"x": 5})
            assert result.structured_content == {"x": 5}


def _greeter(greeting: str, config: Any = None) -> Peer:
    peer = Peer(new_identity(), **({} if config is None else {"config": config}))

    @peer.capability("org.example.greet", version="1.0.0", notes=f"Says {greeting}.")
    async def greet(name: str) -> dict[str, str]:
        return {"greeting": f"{greeting}, {name}."}

    @peer.capability(f"org.example.only.{greeting.lower()}", version="1.0.0")
    async def only() -> None:
        return None

    return peer


@pytest.mark.trio
async def test_several_peers_clashes_go_to_the_later_peer_and_names_can_be_listed_one_by_one() -> None:
    async with _greeter("Hello").serve("amp://127.0.0.1:0") as first, \
            _greeter("Bonjour").serve("amp://127.0.0.1:0") as second:
        async with embedded([first.url, second.url]) as (url, _), http_session(url) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == {"org.example.greet", "org.example.greet.peer2", "org.example.only.hello",
                                  "org.example.only.bonjour"}
            assert tools["org.example.greet.peer2"].description == f"Says Bonjour. (peer {second.url})"
            result = await session.call_tool("org.example.greet.peer2", {"name": "Ada"})
            assert result.structured_content == {"greeting": "Bonjour, Ada."}
            result = await session.call_tool("org.example.greet", {"name": "Ada"})
            assert result.structured_content == {"greeting": "Hello, Ada."}
        # A peer without the '*' listing is asked name by name (--capability).
        async with embedded(second.url, names=["org.example.greet", "org.example.missing"]) as (url, _), \
                http_session(url) as session:
            assert [tool.name for tool in (await session.list_tools()).tools] == ["org.example.greet"]


@pytest.mark.trio
async def test_a_peer_that_did_not_announce_the_listing_needs_its_names(caplog: pytest.LogCaptureFixture) -> None:
    from ampcap.net.daemon.config import DaemonConfig
    from ampcap.peer.config import ConnectionConfig

    caplog.set_level(logging.WARNING, "ampcap.mcp")
    other = _greeter("Hello", DaemonConfig(connection=ConnectionConfig(extensions=())))  # another implementation
    async with other.serve("amp://127.0.0.1:0") as server:
        async with embedded(server.url) as (url, _), http_session(url) as session:
            assert (await session.list_tools()).tools == []
        assert "does not offer listing every capability" in caplog.text
        assert "--capability NAME" in caplog.text
        async with embedded(server.url, names=["org.example.greet"]) as (url, _), http_session(url) as session:
            assert [tool.name for tool in (await session.list_tools()).tools] == ["org.example.greet"]


@pytest.mark.trio
async def test_polling_notices_a_change_the_peer_does_not_announce() -> None:
    changed = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with _greeter("Hello").serve("amp://127.0.0.1:0") as server:
        async with embedded(server.url, poll_s=0.2) as (url, gateway_server), http_session(url, on_message) as session:
            assert len((await session.list_tools()).tools) == 2
            await trio.sleep(0.5)  # a few polls that find nothing new: no notification
            assert not changed.is_set() and gateway_server.gateway.changes == 1
            server.daemon.catalog.registry.add(demo_manifest().capabilities[-1])
            with trio.fail_after(5):
                await changed.wait()
            assert len((await session.list_tools()).tools) == 3


@pytest.mark.trio
async def test_an_amps_peer_checked_against_its_ca(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    provider = Peer(new_identity(), manifest=demo_manifest(), tls=server_context(cert, key))
    async with provider.serve("amps://127.0.0.1:0") as server:
        dial = DialOptions(peer_did=server.did, ssl_context=client_context(ca_file=cert))
        async with embedded(server.url, dial=dial) as (url, _), http_session(url) as session:
            result = await session.call_tool("org.ampcap.demo.math.add", {"a": 1, "b": 1})
            assert result.structured_content == {"sum": 2}
        # Without the CA the certificate is not trusted: no tools, calls answer 5002.
        async with embedded(server.url) as (url, _), http_session(url) as session:
            assert (await session.list_tools()).tools == []


@pytest.mark.trio
@pytest.mark.parametrize("scheme", ["http", "ws"])
async def test_a_peer_reached_over_the_rfc002_http_and_websocket_bindings(tmp_path: Path, scheme: str) -> None:
    """Issue 27: the gateway dials what every client dials, http(s):// and
    ws(s):// included (a real `serve --http`). The POST binding's HELLO
    agrees no extension, so over http:// the '*' listing is not asked (R22)
    and the capabilities are named; a WebSocket runs HELLO and lists."""
    with serve_process(tmp_path, "--http", "127.0.0.1:0") as served:
        assert served.proc.stdout is not None
        http_url = served.proc.stdout.readline().split()[0]  # the second line names the HTTP endpoint
        url = http_url.replace("http://", f"{scheme}://", 1)
        if scheme == "http":
            async with embedded(url) as (mcp_url, _), http_session(mcp_url) as session:
                assert (await session.list_tools()).tools == []
        options = {"names": ["org.ampcap.demo.math.add"]} if scheme == "http" else {}
        async with embedded(url, **options) as (mcp_url, _), http_session(mcp_url) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert "org.ampcap.demo.math.add" in names
            result = await session.call_tool("org.ampcap.demo.math.add", {"a": 40, "b": 2})
            assert not result.is_error and result.structured_content == {"sum": 42}
