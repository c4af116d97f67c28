"""The trio driver over in-memory streams (MockClock), plus one TLS loopback."""

from __future__ import annotations

import ssl
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import self_signed_cert  # noqa: E402
from conn_helpers import T0, Outbound, make_conn  # noqa: E402

from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.peer.connection import Role  # noqa: E402
from ampcap.peer.events import (  # noqa: E402
    ConnectionTerminated,
    Event,
    GoAwayReceived,
    MessageReceived,
    Negotiated,
    PingAcknowledged,
)
from ampcap.peer.state import ConnState  # noqa: E402
from ampcap.net.transport.listener import Listener  # noqa: E402
from ampcap.net.transport.stream import ConnectionDriver, open_stream  # noqa: E402
from ampcap.net.transport.tls import client_context, server_context  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.frames import FrameDecoder, FrameType, Framing  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402


def mock_clock_ms() -> int:
    return T0 + int(trio.current_time() * 1000)


class Recorder:
    """Collects a driver's events and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = trio.Event()

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, cls: type) -> Any:
        while True:
            for e in self.events:
                if isinstance(e, cls):
                    return e
            await self._changed.wait()


def driver_pair(stream_pair: Any = trio.testing.memory_stream_pair, client_cfg: ConnectionConfig | None = None,
                server_cfg: ConnectionConfig | None = None) -> tuple[ConnectionDriver, Recorder,
                                                                     ConnectionDriver, Recorder]:
    a, b = stream_pair()
    cr, sr = Recorder(), Recorder()
    client = ConnectionDriver(make_conn(Role.CLIENT, 1, client_cfg), a, on_event=cr, clock_ms=mock_clock_ms)
    server = ConnectionDriver(make_conn(Role.SERVER, 2, server_cfg), b, on_event=sr, clock_ms=mock_clock_ms)
    return client, cr, server, sr


class CountingStream(trio.abc.Stream):
    """Wraps a stream and counts send_all calls."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sends = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sends += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Flood:
    """Sends padded messages on a driver (waiting for room as ``send()``
    does) until the connection closes; counts them and the largest backlog."""

    def __init__(self, driver: ConnectionDriver, pad: int) -> None:
        self.driver = driver
        self.pad = pad
        self.sent = 0
        self.max_backlog = 0

    async def run(self) -> None:
        while self.driver.conn.state is not ConnState.CLOSED:
            try:
                await self.driver.send(Outbound(typ=MessageType.MESSAGE, body={"pad": b"x" * self.pad}))
            except Exception:
                return
            self.sent += 1
            self.max_backlog = max(self.max_backlog, self.driver.backlog)


@pytest.mark.trio
async def test_open_exchange_and_close(autojump_clock: trio.testing.MockClock) -> None:
    client, cr, server, sr = driver_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await cr.wait_for(Negotiated)
        await sr.wait_for(Negotiated)
        env = client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"text": "hi"}))
        got = await sr.wait_for(MessageReceived)
        assert got.inbound.envelope.id == env.id
        # A reply sent from the server's owner.
        server.send_nowait(Outbound(typ=MessageType.ACK, body={"ack_source": "recipient"}, reply_to=env.id))
        reply = await cr.wait_for(MessageReceived)
        assert reply.inbound.envelope.reply_to == env.id
        client.close()
        term = await sr.wait_for(ConnectionTerminated)
        assert term.by_peer
    assert client.closed.is_set() and server.closed.is_set()


@pytest.mark.trio
async def test_keepalive_runs_on_the_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    client, cr, server, sr = driver_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await cr.wait_for(Negotiated)
        start = trio.current_time()
        await cr.wait_for(PingAcknowledged)
        assert 29.9 <= trio.current_time() - start <= 31
        assert client.conn.state is ConnState.OPEN
        client.close()


@pytest.mark.trio
async def test_handshake_timeout_with_a_silent_peer(autojump_clock: trio.testing.MockClock) -> None:
    a, b = trio.testing.memory_stream_pair()
    rec = Recorder()
    server = ConnectionDriver(make_conn(Role.SERVER, 2), b, on_event=rec, clock_ms=mock_clock_ms)
    with trio.fail_after(60):
        await server.run()
    term = await rec.wait_for(ConnectionTerminated)
    assert term.code == 5003 and 9.9 <= trio.current_time() <= 10.5
    # The silent peer still got the transport ERROR before the close.
    data = await a.receive_some()
    (frame,) = FrameDecoder().feed(data)
    assert frame.type is FrameType.ERROR


@pytest.mark.trio
async def test_frames_queued_together_leave_in_one_send_all(autojump_clock: trio.testing.MockClock) -> None:
    a, b = trio.testing.memory_stream_pair()
    counting = CountingStream(a)
    cr, sr = Recorder(), Recorder()
    client = ConnectionDriver(make_conn(Role.CLIENT, 1), counting, on_event=cr, clock_ms=mock_clock_ms)
    server = ConnectionDriver(make_conn(Role.SERVER, 2), b, on_event=sr, clock_ms=mock_clock_ms)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await cr.wait_for(Negotiated)
        before = counting.sends
        for i in range(100):
            client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"i": i}))
        while sum(isinstance(e, MessageReceived) for e in sr.events) < 100:
            await trio.sleep(0.001)
        assert counting.sends - before == 1
        client.close()


@pytest.mark.trio
async def test_a_peer_that_never_reads_stalls_only_itself(autojump_clock: trio.testing.MockClock) -> None:
    cfg = ConnectionConfig(max_send_buffer=4096)
    # Pair 1: lockstep streams and a client that stops reading after HELLO.
    stuck_client, stuck_rec, stuck_server, stuck_srec = driver_pair(trio.testing.lockstep_stream_pair, None, cfg)
    ok_client, ok_rec, ok_server, ok_srec = driver_pair(trio.testing.memory_stream_pair, None, cfg)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stuck_client.run)
        nursery.start_soon(stuck_server.run)
        nursery.start_soon(ok_client.run)
        nursery.start_soon(ok_server.run)
        await stuck_srec.wait_for(Negotiated)
        await stuck_rec.wait_for(Negotiated)
        await ok_rec.wait_for(Negotiated)
        flood = Flood(stuck_server, 1000)

        # From its next read on, the stuck client never reads again; lockstep
        # streams make the server's send_all block until someone reads.
        stuck_client.stream.receive_some = _never  # type: ignore[method-assign]
        nursery.start_soon(flood.run)
        await trio.sleep(1)
        # Bounded: the flood waits instead of queueing without limit.
        assert 0 < flood.sent < 20 and flood.max_backlog <= 4096 + 1200
        # The other connection is unaffected.
        ok_client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"t": 1}))
        with trio.fail_after(1):
            await ok_srec.wait_for(MessageReceived)
        # The stuck write gives up after the write timeout and closes that connection only.
        with trio.fail_after(120):
            await stuck_srec.wait_for(ConnectionTerminated)
        assert ok_server.conn.state is ConnState.OPEN
        stuck_client.close()
        ok_client.close()


async def _never(max_bytes: int | None = None) -> bytes:
    await trio.sleep_forever()
    raise AssertionError


@pytest.mark.trio
async def test_server_goaway_reaches_client(autojump_clock: trio.testing.MockClock) -> None:
    client, cr, server, sr = driver_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await cr.wait_for(Negotiated)
        server.start_drain(0, "bye")
        goaway = await cr.wait_for(GoAwayReceived)
        assert goaway.message == "bye" and client.conn.state is ConnState.DRAINING
        # The drain period (30 s) ends the server side, which closes the stream.
        await cr.wait_for(ConnectionTerminated)


@pytest.mark.trio
async def test_aclose_sends_goaway_then_closes(autojump_clock: trio.testing.MockClock) -> None:
    client, cr, server, sr = driver_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await sr.wait_for(Negotiated)
        await server.aclose(0, "done")
        assert server.closed.is_set()
        assert (await cr.wait_for(GoAwayReceived)).message == "done"
        assert (await cr.wait_for(ConnectionTerminated)).by_peer


# ---------------------------------------------------------------- memory


@pytest.mark.trio
async def test_memory_per_idle_connection_is_small() -> None:
    n = 200
    tracemalloc.start()
    try:
        base = tracemalloc.take_snapshot()
        drivers = []
        async with trio.open_nursery() as nursery:
            recs = []
            for _ in range(n):
                c, cr, s, sr = driver_pair()
                drivers += [c, s]
                recs.append(cr)
                nursery.start_soon(c.run)
                nursery.start_soon(s.run)
            for r in recs:
                await r.wait_for(Negotiated)
            await trio.sleep(0.05)
            now = tracemalloc.take_snapshot()
            used = sum(stat.size_diff for stat in now.compare_to(base, "filename"))
            per_conn = used / (2 * n)
            print(f"idle connection memory: {per_conn / 1024:.1f} KiB per side "
                  f"(driver + Connection + memory stream), {n} pairs")
            assert per_conn <= 64 * 1024
            for d in drivers:
                d.close()
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------- TLS loopback


@pytest.mark.trio
async def test_tls_loopback(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    listener = Listener(lambda: make_conn(Role.SERVER, 2), ssl_context=server_context(cert, key))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            (tcp,) = await nursery.start(listener.serve_tcp, 0, "127.0.0.1")
            port = tcp.socket.getsockname()[1]
            url = parse_url(f"amps://localhost:{port}")
            stream = await open_stream(url, ssl_context=client_context(ca_file=cert))
            rec = Recorder()
            client = ConnectionDriver(make_conn(Role.CLIENT, 1), stream, on_event=rec)
            nursery.start_soon(client.run)
            negotiated = await rec.wait_for(Negotiated)
            assert negotiated.version == "1.0"
            assert stream.selected_alpn_protocol() == "amp/1"  # type: ignore[attr-defined]
            assert stream.cipher() is not None  # type: ignore[attr-defined]
            listener.stop()
            await rec.wait_for(GoAwayReceived)
            client.close()


@pytest.mark.trio
async def test_tls_client_verifies_by_default(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    listener = Listener(lambda: make_conn(Role.SERVER, 2), ssl_context=server_context(cert, key))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            (tcp,) = await nursery.start(listener.serve_tcp, 0, "127.0.0.1")
            port = tcp.socket.getsockname()[1]
            stream = await open_stream(parse_url(f"amps://localhost:{port}"))
            with pytest.raises(trio.BrokenResourceError) as info:
                await stream.send_all(b"x")
            assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
            await trio.aclose_forcefully(stream)
            listener.stop()


@pytest.mark.trio
async def test_a_scheme_mismatch_is_named_on_both_sides(tmp_path: Path) -> None:
    # amp:// against a TLS port, and amps:// against a plain one: each side
    # says what went wrong instead of "peer closed the connection".
    cert, key = self_signed_cert(tmp_path)
    server_events = Recorder()

    async def handler(driver: ConnectionDriver) -> None:
        driver.on_event = server_events
        await driver.run()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            tls = Listener(lambda: make_conn(Role.SERVER, 2), handler=handler, ssl_context=server_context(cert, key))
            plain = Listener(lambda: make_conn(Role.SERVER, 2))
            (tls_tcp,) = await nursery.start(tls.serve_tcp, 0, "127.0.0.1")
            (plain_tcp,) = await nursery.start(plain.serve_tcp, 0, "127.0.0.1")

            plain_client = Recorder()
            stream = await open_stream(parse_url(f"amp://127.0.0.1:{tls_tcp.socket.getsockname()[1]}"))
            await ConnectionDriver(make_conn(Role.CLIENT, 1), stream, on_event=plain_client).run()
            ended = await plain_client.wait_for(ConnectionTerminated)
            assert "before answering the handshake (an amps:// TLS port" in ended.reason
            ended = await server_events.wait_for(ConnectionTerminated)
            assert ended.reason.startswith("TLS failed: ") and "does not speak TLS" in ended.reason

            tls_client = Recorder()
            stream = await open_stream(parse_url(f"amps://localhost:{plain_tcp.socket.getsockname()[1]}"),
                                       ssl_context=client_context(ca_file=cert))
            await ConnectionDriver(make_conn(Role.CLIENT, 1), stream, on_event=tls_client).run()
            ended = await tls_client.wait_for(ConnectionTerminated)
            assert ended.reason.startswith("TLS failed: ") and "does not speak TLS" in ended.reason
            tls.stop()
            plain.stop()


@pytest.mark.trio
async def test_raw_framing_reports_negotiated_at_once_with_a_silent_peer() -> None:
    """Raw framing has no handshake: Connection.start() queues Negotiated,
    and the driver delivers it before any read (a relay never speaks first)."""
    ours, _theirs = trio.testing.memory_stream_pair()  # nobody ever writes on the far end
    recorder = Recorder()
    cfg = ConnectionConfig(framing=Framing.RAW, strict_principal=False, keepalive_interval_ms=None)
    driver = ConnectionDriver(make_conn(Role.CLIENT, 1, cfg, peer_did="did:web:relay.example"), ours,
                              on_event=recorder, clock_ms=mock_clock_ms)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver.run)
        with trio.fail_after(1):
            await recorder.wait_for(Negotiated)
        driver.close()


class _QueuedEvents:
    """Just enough of a Connection for ConnectionDriver._deliver."""

    def __init__(self, events: list[Any]) -> None:
        self.events = list(events)
        self.pending_bytes = 0
        self.state = ConnState.OPEN

    def next_event(self) -> Any:
        return self.events.pop(0) if self.events else None

    def get_timer(self) -> None:
        return None


@pytest.mark.trio
async def test_a_second_delivery_waits_for_a_suspended_one_and_keeps_event_order() -> None:
    # The reader and the timer task both deliver; an owner's on_event may
    # suspend. Events must reach the owner once each, in queue order, and the
    # second caller waits (so a slow owner also holds back further reading).
    conn = _QueuedEvents(["first"])
    seen: list[str] = []
    release = trio.Event()
    second_done = trio.Event()

    async def on_event(event: Any) -> None:
        seen.append(event)
        if event == "first":
            await release.wait()

    driver = ConnectionDriver(conn, None, on_event=on_event)  # type: ignore[arg-type]

    async def second() -> None:
        await driver._deliver()
        second_done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver._deliver)
        await trio.testing.wait_all_tasks_blocked()
        conn.events += ["second", "third"]  # queued while "first" is being handled
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == ["first"] and not second_done.is_set()
        release.set()
    assert seen == ["first", "second", "third"] and second_done.is_set()


class WhenSent(CountingStream):
    """Records, at every send_all, how many messages its owner had received."""

    def __init__(self, inner: trio.abc.Stream, received: Recorder) -> None:
        super().__init__(inner)
        self.received = received
        self.received_at_send: list[int] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.received_at_send.append(sum(isinstance(e, MessageReceived) for e in self.received.events))
        await super().send_all(data)


@pytest.mark.trio
async def test_replies_leave_while_the_rest_of_a_read_is_still_being_verified(
        autojump_clock: trio.testing.MockClock) -> None:
    # 30 pipelined messages arrive in one read. The first replies must not
    # wait for all 30 signatures to be checked: a peer waiting on them would
    # sit idle while we verify (the two sides would take turns).
    a, b = trio.testing.memory_stream_pair()
    cr, sr = Recorder(), Recorder()
    client = ConnectionDriver(make_conn(Role.CLIENT, 1), a, on_event=cr, clock_ms=mock_clock_ms)
    watched = WhenSent(b, sr)
    server = ConnectionDriver(make_conn(Role.SERVER, 2), watched, on_event=sr, clock_ms=mock_clock_ms)

    async def answer(event: Event) -> None:
        await sr(event)
        if isinstance(event, MessageReceived):
            env = event.inbound.envelope
            server.send_nowait(Outbound(typ=MessageType.ACK, body={"ack_source": "recipient"}, reply_to=env.id))

    server.on_event = answer
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await cr.wait_for(Negotiated)
        watched.received_at_send.clear()
        for i in range(30):
            client.send_nowait(Outbound(typ=MessageType.MESSAGE, body={"i": i, "pad": "x" * 300}))
        while sum(isinstance(e, MessageReceived) for e in cr.events) < 30:
            await trio.sleep(0.001)
        # One read holds 28 of them. The first replies go out after one slice
        # (7 messages), or two when trio's batch order runs the reader first.
        assert watched.received_at_send[0] <= 14, watched.received_at_send
        assert len(watched.received_at_send) >= 3  # replies left in several writes
        client.close()
