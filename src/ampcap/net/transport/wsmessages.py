"""The WebSocket binding (RFC 002 §5) as a stream the usual driver can run.

A WebSocket carries one AMP message per binary message, HELLO first, like
AMPS without the HANDSHAKE frame. So the sans-I/O
:class:`~ampcap.peer.connection.Connection` runs over it unchanged, in its
message-oriented mode (``Framing.RAW`` with ``raw_hello``): each message it
writes is a 4-byte length and the payload, and :class:`WsMessageStream`
turns each of those into one binary WebSocket message and each received
binary message back into one length-prefixed unit. The
:class:`~ampcap.net.transport.stream.ConnectionDriver`, the daemon's executor,
registry and idempotency cache are then exactly the ones AMPS uses.

WebSocket rules kept here (wsproto does the framing, sans-I/O):

* a text message is refused: close 1003 (§5.2);
* a message over the size limit is refused as its bytes arrive, before it
  is whole: close 1009 (§5.3, Appendix A.5);
* fragments (continuation frames) are joined into the one message (§5.2);
* a Ping is answered with a Pong (the keepalive of §5.3);
* a close frame ends the input; the close we send carries the code of why
  the connection ended (``close_reason``, §5.4: 1008 for a principal
  mismatch, 1002 for a protocol error, 1000 for a clean close).

No compression extension is offered or accepted: an inflated message could
be far larger than the bytes that carried it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError as WsProtocolError

from ...display import shown
from ...errors import AmpError
from ...wire.httpmap import (
    MAX_SIZE_HEADER,
    WS_NOT_BINARY,
    WS_OVERSIZE,
    WS_SUBPROTOCOL,
    code_for_status,
)
from .url import WS_PATH

__all__ = ["WsMessageStream", "client_handshake"]

log = logging.getLogger("ampcap.http")

_READ = 64 * 1024
WS_PROTOCOL_ERROR = 1002  # RFC 6455 §7.4.1; RFC 002 §5.4
CloseReason = Callable[[], tuple[int, str]]


class WsRefused(trio.BrokenResourceError):
    """Input ended because we closed the WebSocket for what the peer sent
    (its ``reason`` is the connection's reason for ending)."""

    @property
    def reason(self) -> str:
        return str(self)


class WsMessageStream(trio.abc.Stream):
    """Length-prefixed AMP messages in and out, WebSocket messages on the wire."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection, *, max_size: int,
                 close_reason: CloseReason | None = None) -> None:
        self._stream = stream
        self._ws = ws
        self._max = max_size
        self.close_reason = close_reason  # the owner may set it once it knows how to ask
        self._send_lock = trio.StrictFIFOLock()  # the reader answers Pings while the writer sends
        self._in = bytearray()  # whole messages, length-prefixed, not yet read
        self._parts: list[bytes] = []  # the message now arriving
        self._part_size = 0
        self._out = bytearray()  # a partial length-prefixed unit from send_all (never in practice)
        self._ended = False  # no more input (closed by either side, or refused)
        self.refused: tuple[int, str] | None = None  # the close we sent for what the peer did
        self.peer_closed: tuple[int, str | None] | None = None  # the peer's close frame
        self.last_heard = trio.current_time()  # when bytes last came (Pongs included): the keepalive's clock

    # ---------------------------------------------------------- input

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._in:
            await self._handle_events()
            if self._in or self._ended:
                break
            try:
                data = await self._stream.receive_some(_READ)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self.last_heard = trio.current_time()
            self._ws.receive_data(bytes(data) if data else None)
            if not data:
                await self._handle_events()
                self._ended = True
        if not self._in:
            if self.refused is not None:  # the connection's log says why, not "peer closed"
                raise WsRefused(f"WebSocket closed {self.refused[0]}: {self.refused[1]}")
            return b""
        size = len(self._in) if max_bytes is None else min(max_bytes, len(self._in))
        chunk = bytes(self._in[:size])
        del self._in[:size]
        return chunk

    async def _handle_events(self) -> None:
        try:
            events = list(self._ws.events())
        except WsProtocolError as exc:
            await self._refuse(WS_PROTOCOL_ERROR, f"WebSocket protocol error: {exc}")
            return
        for event in events:
            if self._ended:
                return
            if type(event) is BytesMessage:
                self._part_size += len(event.data)
                if self._part_size > self._max:
                    await self._refuse(WS_OVERSIZE, f"message larger than {self._max} bytes")
                    return
                self._parts.append(bytes(event.data))
                if event.message_finished:
                    payload = b"".join(self._parts)
                    self._parts, self._part_size = [], 0
                    self._in += len(payload).to_bytes(4, "big")
                    self._in += payload
            elif type(event) is TextMessage:
                await self._refuse(WS_NOT_BINARY, "text messages are refused: AMP is binary (RFC 002 §5.2)")
                return
            elif type(event) is Ping:
                # The events of one read are parsed before they are acted on:
                # a Ping followed by the peer's Close in that read finds the
                # connection closing already, and no Pong may follow a Close.
                if self._ws.state is ConnectionState.OPEN:
                    await self._write(self._ws.send(event.response()))
            elif type(event) is CloseConnection:
                if self._ws.state is ConnectionState.OPEN:
                    # wsproto reports a frame it cannot accept (unmasked,
                    # a reserved opcode, a close reason that is not UTF-8...)
                    # as a close event while the connection is still open:
                    # that is the peer's protocol error, not its close.
                    await self._refuse(WS_PROTOCOL_ERROR, f"WebSocket protocol error: {event.reason}")
                    return
                self.peer_closed = (event.code, event.reason)
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    await self._write(self._ws.send(event.response()))
                self._ended = True
                return

    async def _refuse(self, code: int, reason: str) -> None:
        """Close with ``code`` for something the peer sent; input ends."""
        log.info("WebSocket closed %d for what the peer sent: %s", code, shown(reason, 200))
        self.refused = (code, reason)
        self._ended = True
        self._parts, self._part_size = [], 0
        if self._ws.state is ConnectionState.OPEN:
            await self._write(self._ws.send(CloseConnection(code=code, reason=reason[:120])))

    # --------------------------------------------------------- output

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._out += data
        out = bytearray()
        ws = self._ws
        buf = self._out
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if len(buf) - pos - 4 < size:
                break
            out += ws.send(Message(data=bytes(buf[pos + 4:pos + 4 + size])))
            pos += 4 + size
        del buf[:pos]
        if out:
            if ws.state is not ConnectionState.OPEN:
                raise trio.BrokenResourceError("the WebSocket is closing")
            await self._write(bytes(out))

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def _write(self, data: bytes) -> None:
        if not data:
            return
        async with self._send_lock:
            await self._stream.send_all(data)

    # ---------------------------------------------------------- close

    async def send_eof(self) -> None:  # pragma: no cover - not a HalfCloseableStream user
        raise NotImplementedError

    async def keepalive(self, on_dead: Callable[[str], None], *, interval_s: float = 30.0,
                        timeout_s: float = 10.0) -> None:
        """RFC 002 §5.3: WebSocket Ping/Pong as the keepalive. After
        ``interval_s`` with nothing heard, Ping; nothing within ``timeout_s``
        more: ``on_dead(reason)`` (the owner closes the connection). Runs
        until the stream ends; start it beside the connection's driver."""
        while not self._ended and self._ws.state is ConnectionState.OPEN:
            due = self.last_heard + interval_s
            if trio.current_time() < due:
                await trio.sleep_until(due)
                continue
            try:
                await self._write(self._ws.send(Ping(payload=b"amp")))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            pinged = trio.current_time()
            await trio.sleep(timeout_s)
            if self.last_heard < pinged and not self._ended:
                on_dead(f"keepalive: no WebSocket Pong within {timeout_s:g} s")
                return

    async def aclose(self) -> None:
        self._ended = True
        try:
            if self._ws.state is ConnectionState.OPEN:
                code, reason = self.close_reason() if self.close_reason is not None else (1000, "")
                with trio.move_on_after(1):
                    await self._write(self._ws.send(CloseConnection(code=code, reason=reason[:120])))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await self._stream.aclose()


async def client_handshake(stream: trio.abc.Stream, host: str, *, token: str | None, max_size: int,
                           timeout_s: float) -> WSConnection:
    """Open the WebSocket on ``stream`` (RFC 002 §5.1: ``/amp/v1/ws``,
    subprotocol ``amp.v1``); ``AmpError`` with the mapped code when refused."""
    ws = WSConnection(ConnectionType.CLIENT)
    headers = [(MAX_SIZE_HEADER.lower().encode(), str(max_size).encode())]
    if token is not None:
        headers.append((b"authorization", b"Bearer " + token.encode("ascii")))
    await stream.send_all(ws.send(Request(host=host, target=WS_PATH, subprotocols=[WS_SUBPROTOCOL],
                                          extra_headers=headers)))
    body = bytearray()
    status: int | None = None
    done = False
    with trio.move_on_after(timeout_s):
        while not done:
            try:
                data = await stream.receive_some(_READ)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise AmpError(5002, f"the WebSocket handshake failed: {exc or 'connection lost'}") from None
            ws.receive_data(bytes(data) if data else None)
            try:
                for event in ws.events():
                    if type(event) is AcceptConnection:
                        if event.subprotocol != WS_SUBPROTOCOL:
                            raise AmpError(1001, "the server did not select the amp.v1 subprotocol (RFC 002 §5.1)")
                        return ws
                    if type(event) is RejectConnection:
                        status = event.status_code
                        done = not event.has_body
                    elif type(event) is RejectData:
                        if len(body) < 400:
                            body += event.data[:400 - len(body)]
                        done = event.body_finished
            except WsProtocolError as exc:
                raise AmpError(1001, f"the WebSocket handshake failed: {exc}") from None
            if not data:
                done = True
        if status is None:
            raise AmpError(5002, "the server closed the connection during the WebSocket handshake")
        text = bytes(body).decode("utf-8", "replace").strip()
        raise AmpError(code_for_status(status) or 1001,
                       f"WebSocket upgrade refused: HTTP {status}" + (f" ({text[:200]})" if text else ""))
    raise AmpError(5003, f"no answer to the WebSocket upgrade within {timeout_s:g} s")
