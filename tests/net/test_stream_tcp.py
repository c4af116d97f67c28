"""The driver over real loopback TCP, where it reads and writes the socket
directly (os.read / os.write, waiting through trio only when the kernel has
nothing to give or no room to take): coalescing, order through partial
writes, a peer that stops reading, a peer that resets."""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
sys.path.insert(0, str(Path(__file__).parent))
from conn_helpers import Outbound, make_conn  # noqa: E402
from test_stream import CountingStream, Flood, Recorder  # noqa: E402

from ampcap.net.transport import stream as stream_module  # noqa: E402
from ampcap.net.transport.budget import SendBudget  # noqa: E402
from ampcap.net.transport.stream import ConnectionDriver  # noqa: E402
from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.peer.connection import Role  # noqa: E402
from ampcap.peer.events import ConnectionTerminated, MessageReceived, Negotiated  # noqa: E402
from ampcap.peer.state import ConnState  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402


async def tcp_stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected (client, server) pair of plain TCP streams on loopback."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listener.accept()
    await listener.aclose()
    return client, server


@asynccontextmanager
async def open_pair(*, wrap_client: Callable[[trio.SocketStream], trio.abc.Stream] = lambda s: s,
                    server_cfg: ConnectionConfig | None = None, server_on_event: Any = None,
                    write_timeout_s: float = 30.0, server_budget: SendBudget | None = None
                    ) -> AsyncIterator[tuple[ConnectionDriver, Recorder, ConnectionDriver, Recorder]]:
    a, b = await tcp_stream_pair()
    cr, sr = Recorder(), Recorder()
    client = ConnectionDriver(make_conn(Role.CLIENT, 1), wrap_client(a), on_event=cr)
    server = ConnectionDriver(make_conn(Role.SERVER, 2, server_cfg), b, on_event=server_on_event or sr,
                              write_timeout_s=write_timeout_s, send_budget=server_budget)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        with trio.fail_after(10):
            await cr.wait_for(Negotiated)
        yield client, cr, server, sr
        client.close()
        server.close()


class WriteLog:
    """Records every os.write the driver makes: (fd, bytes asked, bytes
    taken, the name of the driver method whose task made it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int, int, str]] = []
        real = os.write

        def write(fd: int, data: Any) -> int:
            task = trio.lowlevel.current_task().coro.cr_code.co_name
            try:
                n = real(fd, data)
            except BlockingIOError:
                self.calls.append((fd, len(data), 0, task))
                raise
            self.calls.append((fd, len(data), n, task))
            return n

        monkeypatch.setattr(stream_module.os, "write", write)

    def on(self, stream: trio.SocketStream) -> list[tuple[int, int, str]]:
        fd = stream.socket.fileno()
        return [(asked, taken, task) for f, asked, taken, task in self.calls if f == fd]


def received(rec: Recorder) -> list[Any]:
    return [e.inbound.envelope.body for e in rec.events if isinstance(e, MessageReceived)]


@pytest.mark.trio
async def test_calls_queued_together_leave_in_two_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first message queued outside a delivery goes at once (a lone call
    # does not wait for the writer task); the other 99 queued in the same
    # turn leave together when the writer runs.
    log = WriteLog(monkeypatch)
    async with open_pair() as (client, cr, server, sr):
        assert isinstance(client.stream, trio.SocketStream)
        before = len(log.on(client.stream))
        for i in range(100):
            client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"i": i}))
        with trio.fail_after(10):
            while len(received(sr)) < 100:
                await sr._changed.wait()
        assert [b["i"] for b in received(sr)] == list(range(100))
        writes = log.on(client.stream)[before:]
        assert len(writes) == 2 and all(asked == taken for asked, taken, _ in writes)


class AckingServer:
    """A server event handler that records every event and answers each
    MESSAGE with an ACK from inside the delivery (set ``driver`` first)."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.driver: ConnectionDriver | None = None

    async def __call__(self, event: Any) -> None:
        await self.recorder(event)
        if isinstance(event, MessageReceived) and event.inbound.envelope.typ == MessageType.MESSAGE:
            assert self.driver is not None
            self.driver.send_nowait(Outbound(typ=MessageType.ACK, body={"ack_source": "recipient"},
                                             reply_to=event.inbound.envelope.id))


@pytest.mark.trio
async def test_replies_made_while_delivering_a_read_leave_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    log = WriteLog(monkeypatch)
    acking = AckingServer()
    async with open_pair(server_on_event=acking) as (client, cr, server, _):
        acking.driver = server
        assert isinstance(server.stream, trio.SocketStream)
        # One at a time: every reply is written by the reader task that
        # delivered the request, in one write, with no writer task woken.
        before = len(log.on(server.stream))
        for i in range(20):
            env = client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"i": i}))
            with trio.fail_after(10):
                while not any(isinstance(e, MessageReceived) and e.inbound.envelope.reply_to == env.id
                              for e in cr.events):
                    await cr._changed.wait()
        assert [task for _, _, task in log.on(server.stream)[before:]] == ["_reader"] * 20


@pytest.mark.trio
async def test_order_and_content_survive_partial_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    # A small send buffer and 200 messages of 20 KB each (4 MB), queued as
    # fast as the 64 KiB send budget allows: most writes are partial, and
    # messages keep arriving while the rest of an earlier write waits for
    # room, which must go first. (A tiny receive buffer as well would stall
    # loopback TCP itself: its window never reaches one 64 KB segment.)
    log = WriteLog(monkeypatch)
    async with open_pair(server_cfg=ConnectionConfig(max_send_buffer=64 * 1024)) as (client, cr, server, _):
        assert isinstance(server.stream, trio.SocketStream)
        server.stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
        with trio.fail_after(30):
            for i in range(200):
                await server.send(Outbound(typ=MessageType.MESSAGE,
                                           body={"i": i, "pad": struct.pack(">I", i) * 5000}))
            while len(received(cr)) < 200:
                await cr._changed.wait()
        bodies = received(cr)
        assert [x["i"] for x in bodies] == list(range(200))
        assert all(x["pad"] == struct.pack(">I", x["i"]) * 5000 for x in bodies)
        assert any(taken < asked for asked, taken, _ in log.on(server.stream))  # the partial path was taken


@pytest.mark.trio
async def test_the_shared_send_budget_is_given_back_once_the_writer_catches_up() -> None:
    # Partial writes leave bytes for the writer task; once it has written them
    # all, the budget must show nothing outstanding for this still-open connection.
    budget = SendBudget(64 << 20)
    async with open_pair(server_budget=budget) as (client, cr, server, _):
        assert isinstance(server.stream, trio.SocketStream)
        server.stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
        with trio.fail_after(30):
            for i in range(50):
                server.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"i": i, "pad": b"p" * 20_000}))
            assert budget.used > 0  # the kernel could not take it all at once
            while len(received(cr)) < 50:
                await cr._changed.wait()
            while server.backlog:
                await trio.sleep(0.01)
        assert server.conn.state is ConnState.OPEN
        assert budget.used == 0


@pytest.mark.trio
async def test_a_tcp_peer_that_stops_reading_stalls_only_itself() -> None:
    cfg = ConnectionConfig(max_send_buffer=64 * 1024)

    async def never(max_bytes: int | None = None) -> bytes:
        await trio.sleep_forever()
        raise AssertionError

    with trio.fail_after(30):
        # The stuck client's socket hides behind a plain Stream wrapper, so
        # its driver reads through receive_some, which the test then stops.
        async with open_pair(wrap_client=CountingStream, server_cfg=cfg, write_timeout_s=1.0) as (
                stuck_client, _, stuck_server, stuck_srec), open_pair() as (ok_client, _, ok_server, ok_srec):
            stuck_client.stream.receive_some = never  # type: ignore[method-assign]
            flood = Flood(stuck_server, 10_000)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood.run)
                # The other connection carries on meanwhile.
                ok_client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"t": 1}))
                await ok_srec.wait_for(MessageReceived)
                # No progress for write_timeout_s: that connection, and only it, closes.
                term = await stuck_srec.wait_for(ConnectionTerminated)
                assert "read nothing for 1 s" in term.reason
            assert 0 < flood.sent < 1000 and flood.max_backlog <= 64 * 1024 + 11_000  # send() waited for room
            assert stuck_server.closed.is_set() and ok_server.conn.state is ConnState.OPEN


@pytest.mark.trio
async def test_a_peer_that_resets_ends_the_connection_cleanly() -> None:
    with trio.fail_after(30):
        async with open_pair() as (client, cr, server, sr):
            assert isinstance(client.stream, trio.SocketStream)
            # Abort the client's socket: the kernel answers the server with RST.
            client.stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.stream.socket.close()
            for _ in range(200):
                if server.conn.state is ConnState.CLOSED:
                    break
                try:
                    await server.send(Outbound(typ=MessageType.MESSAGE, body={"pad": b"x" * 10_000}))
                except Exception:
                    break
                await trio.sleep(0.001)
            term = await sr.wait_for(ConnectionTerminated)
            assert term.by_peer or "cannot write" in term.reason or "peer closed" in term.reason
            with trio.fail_after(5):
                await server.closed.wait()


@pytest.mark.trio
async def test_a_read_is_sliced_by_messages_not_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Replies leave after each slice of a read. A slice holds about
    # SLICE_MESSAGES messages whatever their size: large messages (a
    # delegated invoke's chain) do not make the driver flush, and give the
    # scheduler a turn, after every other message.
    log = WriteLog(monkeypatch)
    acking = AckingServer()
    async with open_pair(server_on_event=acking) as (client, cr, server, _):
        acking.driver = server
        async def burst(count: int, pad: int) -> list[tuple[int, int, str]]:
            before = len(log.on(server.stream))
            sent = [client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"pad": b"x" * pad})).id
                    for _ in range(count)]
            with trio.fail_after(10):
                while not all(any(isinstance(e, MessageReceived) and e.inbound.envelope.reply_to == i
                                  for e in cr.events) for i in sent[-1:]):
                    await cr._changed.wait()
            return log.on(server.stream)[before:]

        await burst(64, 300)  # small messages (~0.5 KB): about a 4 KiB slice, as before
        assert getattr(server, "_slice", stream_module.RECEIVE_SLICE) < 1.5 * stream_module.RECEIVE_SLICE
        big = await burst(96, 1800)  # ~2 KB each: a 4 KiB slice would hold two
        assert len(big) <= 96 // 4, len(big)  # not one write per two messages
        assert server._slice > 2 * stream_module.RECEIVE_SLICE
