"""The accept loop over real loopback TCP (few tests; the soak is marked slow)."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
from conn_helpers import Outbound, make_conn  # noqa: E402

from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.peer.connection import Role  # noqa: E402
from ampcap.peer.events import ConnectionTerminated, Event, GoAwayReceived, MessageReceived, Negotiated  # noqa: E402
from ampcap.net.transport.listener import Listener  # noqa: E402
from ampcap.net.transport.stream import ConnectionDriver, open_stream  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.frames import FrameDecoder, FrameType, Framing  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402
from ampcap.wire.transport import TransportError  # noqa: E402


class Waiter:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.changed = trio.Event()

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, cls: type) -> Any:
        while not any(isinstance(e, cls) for e in self.events):
            await self.changed.wait()
        return next(e for e in self.events if isinstance(e, cls))


async def _start(nursery: trio.Nursery, listener: Listener) -> str:
    (tcp,) = await nursery.start(listener.serve_tcp, 0, "127.0.0.1")
    return f"amp://127.0.0.1:{tcp.socket.getsockname()[1]}"


async def _client(nursery: trio.Nursery, url: str, seed: int = 1) -> tuple[ConnectionDriver, Waiter]:
    waiter = Waiter()
    driver = ConnectionDriver(make_conn(Role.CLIENT, seed), await open_stream(parse_url(url)), on_event=waiter)
    nursery.start_soon(driver.run)
    return driver, waiter


@pytest.mark.trio
async def test_serve_message_and_graceful_stop() -> None:
    received: list[Any] = []

    async def handler(driver: ConnectionDriver) -> None:
        async def on_event(event: Event) -> None:
            if isinstance(event, MessageReceived):
                received.append(event)
                driver.send_nowait(Outbound(typ=MessageType.ACK, body={"ack_source": "recipient"},
                                            reply_to=event.inbound.envelope.id))
        driver.on_event = on_event
        await driver.run()

    listener = Listener(lambda: make_conn(Role.SERVER, 2), handler=handler)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            url = await _start(nursery, listener)
            client, waiter = await _client(nursery, url)
            await waiter.wait_for(Negotiated)
            env = client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"text": "hi"}))
            ack = await waiter.wait_for(MessageReceived)
            assert ack.inbound.envelope.reply_to == env.id
            assert listener.active == 1
            listener.stop()
            goaway = await waiter.wait_for(GoAwayReceived)
            assert goaway.last_id == env.id
            client.close()  # the client finishes; the server side sees EOF and ends
        assert listener.active == 0 and len(received) == 1


@pytest.mark.trio
async def test_connection_limit_refuses_with_5004() -> None:
    listener = Listener(lambda: make_conn(Role.SERVER, 2), max_connections=2)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            url = await _start(nursery, listener)
            first = [await _client(nursery, url, seed) for seed in (1, 3)]
            for _, waiter in first:
                await waiter.wait_for(Negotiated)
            extra = await open_stream(parse_url(url))
            await extra.send_all(b"\0\0\0\x05\x02abcd")  # a (bogus) HANDSHAKE left unread
            data = b""
            while chunk := await extra.receive_some():
                data += chunk
            (frame,) = FrameDecoder().feed(data)
            assert frame.type is FrameType.ERROR and TransportError.from_payload(frame.payload).code == 5004
            assert listener.refused == 1
            await extra.aclose()
            listener.stop()
            for driver, waiter in first:
                await waiter.wait_for(GoAwayReceived)
                driver.close()


@pytest.mark.trio
async def test_a_raw_listener_refuses_by_closing_without_a_transport_frame() -> None:
    # A raw-framing peer would read an RFC 002 ERROR frame as a garbled message.
    raw = ConnectionConfig(framing=Framing.RAW)
    listener = Listener(lambda: make_conn(Role.SERVER, 2, raw), max_connections=1, refusal=None)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            url = await _start(nursery, listener)
            first = await open_stream(parse_url(url))
            await first.send_all(b"\0\0\0\x01\xa0")  # speak, so it is not the silent kind
            while listener.accepted < 1:
                await trio.sleep(0.01)
            extra = await open_stream(parse_url(url))
            assert await extra.receive_some() == b"" and listener.refused == 1
            await extra.aclose()
            await first.aclose()
            listener.stop()
            nursery.cancel_scope.cancel()


def _soak_count() -> int:
    return 1000 if os.environ.get("AMPCAP_SOAK_SCALE", "small") == "full" else 200


@pytest.mark.slow
@pytest.mark.trio
async def test_many_connections_open_at_once() -> None:
    n = _soak_count()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * n + 64:
        pytest.skip(f"ulimit -n is {soft}; {2 * n + 64} file descriptors needed")
    listener = Listener(lambda: make_conn(Role.SERVER, 2), max_connections=n)
    started = time.perf_counter()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await _start(nursery, listener)
            clients: list[tuple[ConnectionDriver, Waiter]] = []

            async def connect_one(seed: int) -> None:
                clients.append(await _client(nursery, url, seed))

            async with trio.open_nursery() as connecting:
                for i in range(n):
                    connecting.start_soon(connect_one, 1 + i % 200)
            for _, waiter in clients:
                await waiter.wait_for(Negotiated)
            all_open = time.perf_counter() - started
            assert listener.active == n and listener.refused == 0
            listener.stop()
            for driver, waiter in clients:
                await waiter.wait_for(GoAwayReceived)
                driver.close()
    elapsed = time.perf_counter() - started
    print(f"{n} connections: all negotiated after {all_open:.2f} s, stopped after {elapsed:.2f} s")
    assert listener.active == 0
    assert all(isinstance(w.events[-1], ConnectionTerminated) for _, w in clients)
