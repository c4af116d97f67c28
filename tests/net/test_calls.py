"""Our own calls end with why their connection could not answer them.

A call pending on a connection that ends learns of it from the connection's
end (ConnectionTerminated: its code and reason) or from the peer closing its
side. Each test runs the daemon in-process against a scripted provider over
``trio.testing.memory_stream_pair``: a sans-I/O server Connection that
negotiates, then, on our first request, does one bad thing.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import new_identity  # noqa: E402

from ampcap.caps.catalog import Catalog  # noqa: E402
from ampcap.errors import AmpError  # noqa: E402
from ampcap.net.daemon.core import Daemon, Link  # noqa: E402
from ampcap.net.api.peer import Remote  # noqa: E402
from ampcap.peer.connection import Connection, Role  # noqa: E402
from ampcap.peer.events import MessageReceived  # noqa: E402
from ampcap.wire.frames import FrameType, encode_frame  # noqa: E402
from ampcap.wire.identity import DidKeyResolver  # noqa: E402
from ampcap.wire.receive import ReceivePipeline  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402
from ampcap.wire.transport import TransportError  # noqa: E402

Then = Callable[[trio.abc.Stream, Connection], Awaitable[None]]
_REQUESTS = {int(MessageType.CAP_INVOKE), int(MessageType.CAP_QUERY)}


def _now() -> int:
    return time.time_ns() // 1_000_000


async def _provider(stream: trio.abc.Stream, then: Then) -> None:
    """Handshake and HELLO as a server, then ``then`` on the first request."""
    conn = Connection(role=Role.SERVER, identity=new_identity(), pipeline=ReceivePipeline(DidKeyResolver()),
                      entropy=os.urandom)
    conn.start(_now())
    while data := await stream.receive_some():
        conn.receive_data(data, _now())
        if out := conn.data_to_send():
            await stream.send_all(out)
        while (event := conn.next_event()) is not None:
            if isinstance(event, MessageReceived) and event.inbound.envelope.typ in _REQUESTS:
                await then(stream, conn)
                return


@asynccontextmanager
async def calling(then: Then) -> AsyncIterator[tuple[Remote, Link]]:
    daemon = Daemon(new_identity(), Catalog([], cursor_key=os.urandom(32)))
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        nursery.start_soon(_provider, theirs, then)
        link = await daemon.connect_stream(ours)
        yield Remote(daemon, link), link
        await daemon.drain(0.1)
        nursery.cancel_scope.cancel()


async def goaway_and_close(stream: trio.abc.Stream, conn: Connection) -> None:
    conn.start_drain(_now(), 0, "going away")
    await stream.send_all(conn.data_to_send())
    await stream.aclose()


async def speak_http(stream: trio.abc.Stream, conn: Connection) -> None:
    await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    await trio.sleep_forever()  # the framing error is ours to find: no close to hide it


async def transport_error(stream: trio.abc.Stream, conn: Connection) -> None:
    await stream.send_all(encode_frame(FrameType.ERROR, TransportError(code=5004, message="too busy").to_payload()))
    await trio.sleep_forever()


@pytest.mark.trio
@pytest.mark.parametrize("call", ["invoke", "query"])
async def test_a_peer_that_sends_goaway_and_closes_is_named_for_it(call: str) -> None:
    # It said "the peer closed its side before the reply" (and a dial that
    # met the close: "the peer finished sending and every invoke was answered").
    async with calling(goaway_and_close) as (remote, link):
        with trio.fail_after(5), pytest.raises(AmpError) as info:
            if call == "invoke":
                await remote.invoke("org.x.y:1.0.0", params={})
            else:
                await remote.query("org.x.y")
        assert (info.value.code, info.value.message) == (
            5002, "the peer closed the connection (GOAWAY) before answering")
        with trio.fail_after(5):
            await link.driver.closed.wait()
        # What a dial meeting this close would quote ("cannot open connection: ...").
        assert link.driver.terminated is not None
        assert link.driver.terminated.reason == "the peer closed the connection (GOAWAY)"


@pytest.mark.trio
async def test_a_framing_error_is_the_calls_outcome() -> None:
    # It said "connection closed before the reply": the 1001 and what was wrong were lost.
    async with calling(speak_http) as (remote, _):
        with trio.fail_after(5), pytest.raises(AmpError) as info:
            await remote.invoke("org.x.y:1.0.0", params={})
    assert (info.value.code, info.value.message) == (
        1001, "connection closed before the reply: frame declares a 1213486159-byte payload, "
              "over the 16777216-byte maximum")  # "HTTP" read as a frame header


@pytest.mark.trio
async def test_a_transport_error_from_the_peer_is_the_calls_outcome() -> None:
    async with calling(transport_error) as (remote, _):
        with trio.fail_after(5), pytest.raises(AmpError) as info:
            await remote.query("org.x.y")
    assert (info.value.code, info.value.message) == (5004, "connection closed before the reply: too busy")


@pytest.mark.trio
async def test_a_relay_that_closes_at_once_is_said_to_have_closed() -> None:
    # Raw framing (a relay) is ready at once, so the close meets either the
    # dial or the call, as the scheduler has it: both must say what happened.
    # The dial said "the peer finished sending and every invoke was answered".
    async def close_at_once(stream: trio.SocketStream) -> None:
        await stream.aclose()

    daemon = Daemon(new_identity(), Catalog([], cursor_key=os.urandom(32)))
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        [listener] = await nursery.start(functools.partial(trio.serve_tcp, close_at_once, 0, host="127.0.0.1"))
        url = f"amp://127.0.0.1:{listener.socket.getsockname()[1]}"
        outcomes = set()
        for _ in range(10):
            try:
                link = await daemon.join_relay(url, timeout_s=5)
            except AmpError as exc:
                assert (exc.code, exc.message) == (5002, f"{url}: cannot open connection: "
                                                         "the peer closed the connection")
                outcomes.add("dial")
                continue
            with trio.fail_after(5), pytest.raises(AmpError) as info:
                await Remote(daemon, link, to=new_identity().did).query("org.x.y")
            assert (info.value.code, info.value.message) in {
                (5002, "the peer closed the connection before answering"),
                (5002, "cannot send: the connection is closed")}
            outcomes.add("call")
        assert outcomes
        await daemon.drain(0.1)
        nursery.cancel_scope.cancel()
