"""``serve --http``: RFC 002 §5–§6 served into the same daemon as AMPS.

One listener speaks HTTP/1.1 (h11, sans-I/O, on trio sockets; TLS with the
daemon's ``--tls-cert/--tls-key``) and serves

* ``POST /amp/v1/messages`` (§6.1): one AMP message per request body,
  ``application/cbor``. The caller proves its principal with the R21 bearer
  token; the message is checked by the daemon's receive pipeline (so its
  replay cache), its ``from`` must be the principal (strict binding, §7.1:
  403), and it goes to the daemon's one executor, registry and idempotency
  cache: an invoke POSTed here and retried over WebSocket or AMPS runs once.
  The answer is ``200`` with the reply's raw bytes when it is ready within
  ``sync_wait_s``, else ``202``, and the reply waits in the principal's
  mailbox. A HELLO may be POSTed without a token (it is signed, and it is
  how a caller learns our DID, the token's ``aud``): it gets HELLO_ACK.
* ``GET /amp/v1/messages?cursor=…&limit=…`` (§6.2): the principal's
  mailbox (``peer/mailbox.py``) in the fixed polling wrapper.
* ``GET /amp/v1/ws`` with ``Upgrade: websocket`` (§5): subprotocol
  ``amp.v1`` required; then a WebSocket whose binary messages are AMP
  messages, run by the ordinary connection driver (``net/transport/wsmessages.py``).
  The bearer token is optional there: with one, HELLO must come from its
  principal (else close 1008); without, HELLO names the principal, as on AMPS.

Why h11 (and wsproto) directly rather than an ASGI server: the WebSocket
must end up as a byte stream under the same ConnectionDriver as AMPS, which
an ASGI app would see only as events through queues; the request path is a
few dozen lines over h11; and both are sans-I/O libraries of the same family
as ampcap's own core, with no event loop of their own.

Refusals carry the §6.4 status, an ``X-AMP-Error-Code`` header with the AMP
code and a one-line text body.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, Request
from wsproto.utilities import RemoteProtocolError as WsProtocolError

from ...display import shown
from ...errors import AmpError, MessageTooLarge
from ...peer.mailbox import Mailboxes
from ...peer.outbound import Outbound
from ...wire.bearer import verify_until
from ...wire.envelope import Envelope, seal
from ...wire.frames import Framing, MIN_MAX_SIZE
from ...wire.httpmap import (
    CONTENT_TYPE,
    MAX_SIZE_HEADER,
    TRANSPORT_VERSION_HEADER,
    WS_SUBPROTOCOL,
    close_for_code,
    encode_poll,
    status_for_code,
)
from ...wire.registry import MessageType
from .listener import open_listeners
from .sink import ReplySink
from .tls import wrap_server
from .url import MESSAGES_PATH, WS_PATH
from .wsmessages import WsMessageStream

if TYPE_CHECKING:
    from ..daemon.ports import InboundPort

__all__ = ["HttpFront", "HttpConfig"]

log = logging.getLogger("ampcap.http")

_HELLO = int(MessageType.HELLO)
# Types that are themselves answers: accepted (202) at once, nothing awaited.
_ANSWERS = frozenset(int(t) for t in (MessageType.ACK, MessageType.PROCESSING, MessageType.PROGRESS,
                                      MessageType.ERROR, MessageType.CAP_RESULT, MessageType.CAP_DECLARE,
                                      MessageType.PONG, MessageType.HELLO_ACK, MessageType.HELLO_REJECT))
_INTERIM = frozenset(int(t) for t in (MessageType.PROCESSING, MessageType.PROGRESS, MessageType.ACK))
_READ = 64 * 1024
_MAX_TOKENS = 4096
_UNAUTHENTICATED_BODY = 64 * 1024  # a HELLO POSTed without a token (ConnectionConfig.max_negotiation_payload)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpConfig:
    """Limits and waits of the HTTP front (seconds, bytes)."""

    sync_wait_s: float = 2.0  # POST waits this long for the reply before answering 202
    max_connections: int = 10_000  # HTTP and WebSocket connections together
    idle_timeout_s: float = 60.0  # a keep-alive connection with no request
    request_timeout_s: float = 30.0  # a request's head and body must arrive within this
    max_header_bytes: int = 16 * 1024
    replay_window_ms: int = 60_000  # polling: acknowledged replies are redelivered this long (§6.2)
    max_pending_messages: int = 1024  # per principal, before POSTs are refused with 429
    max_pending_bytes: int = 16 << 20  # per principal
    max_pending_total: int = 64 << 20  # all principals
    max_bodies_total: int = 64 << 20  # body bytes arrived and not yet handled, all connections (503 beyond)
    ws_ping_interval_s: float = 30.0  # a WebSocket silent this long gets a Ping (§5.3 keepalive)
    ws_pong_timeout_s: float = 10.0  # ... and is closed when nothing answers within this


class _Principal(ReplySink):
    """One HTTP principal's reply destination (its key in the executor)."""

    def __init__(self, front: HttpFront, did: str) -> None:
        self._front = front
        self.peer_did = did

    def send_nowait(self, out: Outbound) -> Envelope:
        return self._front.keep_reply(self, out)


@dataclass(slots=True)
class _Waiter:
    """A POST waiting for its reply (``raw`` once it came)."""

    principal: str
    done: trio.Event = field(default_factory=trio.Event)
    raw: bytes | None = None


class _Refused(Exception):
    """Answer the request with ``status`` and ``message`` (AMP ``code``)."""

    def __init__(self, status: int, code: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close


def _not_served(method: bytes, path: str, *, known: bool, what: str) -> _Refused:
    """405 (1001) for a known path asked with another method, 404 (2001) for
    a path that serves no ``what`` endpoint; the connection closes after."""
    if known:
        return _Refused(405, 1001, f"{method.decode('ascii', 'replace')} {shown(path)} is not served here",
                        close=True)
    return _Refused(404, 2001, f"no {what} endpoint at {shown(path)}", close=True)


def _refusal(err: AmpError, *, authenticated: bool = True) -> _Refused:
    return _Refused(status_for_code(err.code, authenticated=authenticated), err.code, err.message)


class HttpFront:
    """The HTTP and WebSocket endpoints of one daemon."""

    def __init__(self, daemon: InboundPort, *, ssl_context: ssl.SSLContext | None = None,
                 config: HttpConfig = HttpConfig(), entropy: Callable[[int], bytes] | None = None) -> None:
        import os

        self.daemon = daemon
        self.config = config
        self._ssl = ssl_context
        self._entropy = entropy or os.urandom
        self.max_msg_size = daemon.connection_config.max_msg_size
        self.mailboxes = Mailboxes(epoch=self._entropy(6).hex(), max_messages=config.max_pending_messages,
                                   max_bytes=config.max_pending_bytes, max_total_bytes=config.max_pending_total,
                                   replay_window_ms=config.replay_window_ms)
        self._principals: dict[str, _Principal] = {}
        self._waiters: dict[bytes, list[_Waiter]] = {}
        self._body_bytes = 0
        self._tokens: dict[str, tuple[str, int]] = {}  # verified bearer tokens: principal, valid until (ms)
        self._connections = 0
        self.requests = 0

    # ------------------------------------------------------------ serving

    async def serve(self, host: str, port: int, *,
                    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``host:port`` until cancelled."""
        listeners = await open_listeners(host, port, backlog=4096)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._housekeeping)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery, task_status=task_status)

    async def _housekeeping(self) -> None:
        """Expire replies past their window and forget idle principals."""
        while True:
            await trio.sleep(5)
            self.mailboxes.expire_all(self.daemon.clock.wall_ms())
            for did, sink in list(self._principals.items()):
                if not self.daemon.executor.owes(sink):
                    del self._principals[did]
                    self.daemon.executor.connection_closed(sink)

    async def _handle(self, sock: trio.SocketStream) -> None:
        if self._connections >= self.config.max_connections or self.daemon.closing:
            await trio.aclose_forcefully(sock)
            return
        self._connections += 1
        stream: trio.abc.Stream = wrap_server(sock, self._ssl) if self._ssl is not None else sock
        try:
            await self._http(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away (or TLS failed): nothing to answer
        except Exception as exc:  # a bug of ours costs this one connection
            log.error("HTTP connection failed on an internal error (a bug, please report it): %s",
                      shown(repr(exc)))
            log.debug("internal error on an HTTP connection", exc_info=exc)
        finally:
            self._connections -= 1
            await trio.aclose_forcefully(stream)

    async def _http(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.config.max_header_bytes)
        while True:
            timeout = self.config.idle_timeout_s if conn.their_state is h11.IDLE else self.config.request_timeout_s
            try:
                with trio.fail_after(timeout):
                    event = await _next_event(conn, stream)
            except trio.TooSlowError:
                return
            except h11.RemoteProtocolError as exc:
                await _refuse_malformed(conn, stream, exc, self.config.max_header_bytes)
                return
            if type(event) is not h11.Request:
                return  # ConnectionClosed, or the peer hung up
            # h11 bounds only a head still arriving: one that came whole in a
            # single read is checked here, so the limit is the same either way.
            if _head_size(event) > self.config.max_header_bytes:
                status = 414 if len(event.target) > self.config.max_header_bytes // 2 else 431
                await _respond(conn, stream, status, 1001, "request head exceeds this server's "
                               f"{self.config.max_header_bytes}-byte limit", close=True)
                await _linger(stream)
                return
            self.requests += 1
            try:
                with trio.fail_after(self.config.request_timeout_s):
                    upgraded = await self._route(conn, stream, event)
            except trio.TooSlowError:
                return
            except h11.RemoteProtocolError as exc:
                await _refuse_malformed(conn, stream, exc, self.config.max_header_bytes)
                return
            if upgraded is not None:
                # The WebSocket runs outside the request timeout: it lives
                # until either side closes it or keepalive fails (§5.3).
                await upgraded()
                return
            if conn.their_state is not h11.DONE and conn.their_state is not h11.MUST_CLOSE:
                # A body we refused unread: let the client finish sending it. (MUST_CLOSE: the
                # client said Connection: close and sent it all; it waits for our close.)
                await _linger(stream)
                return
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()

    async def _route(self, conn: h11.Connection, stream: trio.abc.Stream,
                     request: h11.Request) -> Callable[[], Awaitable[None]] | None:
        """Answer one request; when the connection became a WebSocket, the
        session to run on it (the caller runs it without a deadline)."""
        target = request.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        headers = {name.lower(): value for name, value in request.headers}
        try:
            if path == MESSAGES_PATH and request.method == b"POST":
                status, body = await self._post(conn, stream, headers)
                await _respond(conn, stream, status, None, body=body, max_size=self.max_msg_size)
            elif path == MESSAGES_PATH and request.method == b"GET":
                await _drain_body(conn, stream, 0)
                body = self._poll(headers, query)
                await _respond(conn, stream, 200, None, body=body, max_size=self.max_msg_size)
            elif path == WS_PATH and request.method == b"GET":
                return await self._websocket(conn, stream, request, headers)
            else:
                raise _not_served(request.method, path, known=path in (MESSAGES_PATH, WS_PATH), what="AMP")
        except _Refused as refused:
            await _respond(conn, stream, refused.status, refused.code, refused.message, close=refused.close,
                           max_size=self.max_msg_size)
        return None

    # ---------------------------------------------------------------- POST

    def _principal(self, headers: dict[bytes, bytes], *, required: bool = True) -> str | None:
        value = headers.get(b"authorization")
        if value is None:
            if required:
                raise _Refused(401, 3001, "missing Authorization: Bearer <token> (ruling R21)")
            return None
        scheme, _, token = value.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(401, 3001, "Authorization must be 'Bearer <token>'")
        token = token.strip()
        now = self.daemon.clock.wall_ms()
        known = self._tokens.get(token)
        if known is not None and now <= known[1]:
            return known[0]  # verified before and not expired: a client reuses its token for minutes
        try:
            principal, until = verify_until(token, resolver=self.daemon.pipeline.resolver,
                                            audience=self.daemon.identity.did, now_ms=now)
        except AmpError as exc:
            raise _refusal(exc, authenticated=False) from None
        if len(self._tokens) >= _MAX_TOKENS:
            self._tokens.clear()  # crude, bounded: a flood of fresh tokens costs only re-verification
        self._tokens[token] = (principal, until)
        return principal

    async def _post(self, conn: h11.Connection, stream: trio.abc.Stream,
                    headers: dict[bytes, bytes]) -> tuple[int, bytes]:
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if content_type != CONTENT_TYPE.encode():
            raise _Refused(415, 1001, f"Content-Type must be {CONTENT_TYPE}", close=True)
        version = headers.get(TRANSPORT_VERSION_HEADER.lower().encode())
        if version is not None and version.strip() != b"1":
            raise _Refused(400, 1001, f"{TRANSPORT_VERSION_HEADER} {shown(version.decode('latin-1'))} "
                                      "is not supported (1 is)", close=True)
        principal = self._principal(headers, required=False)
        # Without a token only a HELLO is acceptable: a few hundred bytes, not max_msg_size.
        limit = self.max_msg_size if principal is not None else _UNAUTHENTICATED_BODY
        # The total of bodies being read counts the bytes that did arrive, not
        # what a Content-Length promises: a declared 16 MiB sent a byte at a
        # time holds one byte, so a few slow senders cannot refuse everyone
        # else (issue 38). What arrives is held in memory, so it is bounded.
        held = 0

        def account(size: int) -> None:
            nonlocal held
            if self._body_bytes + size > self.config.max_bodies_total:
                raise _Refused(503, 2003, "too many request bodies arriving at once; retry shortly", close=True)
            self._body_bytes += size
            held += size

        try:
            data = await _read_body(conn, stream, limit, headers, account)
        finally:
            self._body_bytes -= held
        now = self.daemon.clock.wall_ms()
        try:
            inbound = self.daemon.pipeline.check(data, now)
        except AmpError as exc:
            raise _refusal(exc) from None
        env = inbound.envelope
        if principal is None:
            if env.typ != _HELLO:
                raise _Refused(401, 3001, "missing Authorization: Bearer <token> (ruling R21)")
            principal = env.sender  # a HELLO proves its sender by its signature
        if env.sender != principal:
            log.info("principal binding refused: principal=%s from=%s id=%s", shown(principal), shown(env.sender),
                     env.id.hex())
            raise _Refused(403, 3001, "from differs from the bearer token's principal (RFC 002 §7.1)")
        if env.typ == _HELLO:
            return 200, self._hello_answer(env, inbound.body, now)
        if env.typ in _ANSWERS:
            self.daemon.deliver(self._sink(principal), inbound)
            return 202, b""
        if not self.mailboxes.has_room(principal) and not inbound.duplicate:
            raise _Refused(429, 2003, "too many replies waiting for this principal's poll; poll, then retry")
        waiter = _Waiter(principal)
        self._waiters.setdefault(env.id, []).append(waiter)
        try:
            self.daemon.deliver(self._sink(principal), inbound)
            if not waiter.done.is_set():
                with trio.move_on_after(self.config.sync_wait_s):
                    await waiter.done.wait()
        finally:
            waiting = self._waiters.get(env.id)
            if waiting is not None:
                waiting.remove(waiter)
                if not waiting:
                    del self._waiters[env.id]
        if waiter.raw is not None:
            return 200, waiter.raw
        return 202, b""

    def _hello_answer(self, env: Envelope, body: Any, now_ms: int) -> bytes:
        """HELLO_ACK (or HELLO_REJECT) to a HELLO POSTed on its own."""
        config = self.daemon.connection_config
        versions = body.get("versions") if type(body) is dict else None
        if type(versions) is not list or not all(type(v) is str for v in versions):
            raise _Refused(400, 1001, "HELLO body needs a 'versions' array of text")
        ours = {v.split(".", 1)[0]: v for v in reversed(config.versions)}
        selected = next((ours[v.split(".", 1)[0]] for v in versions if v.split(".", 1)[0] in ours), None)
        typ, answer = ((MessageType.HELLO_ACK, {"selected": selected}) if selected is not None else
                       (MessageType.HELLO_REJECT, {"reason": "no compatible AMP major version"}))
        _, wire = seal(self.daemon.identity, typ=int(typ), to=env.sender, body=answer, now_ms=now_ms,
                       entropy=self._entropy, ttl=config.default_ttl_ms, reply_to=env.id, thread_id=env.thread_id,
                       v=1, profile=config.profile)
        return wire

    def _sink(self, principal: str) -> _Principal:
        sink = self._principals.get(principal)
        if sink is None:
            sink = self._principals[principal] = _Principal(self, principal)
        return sink

    def keep_reply(self, sink: _Principal, out: Outbound) -> Envelope:
        """Seal a reply for an HTTP principal: to its waiting POST, else its mailbox."""
        config = self.daemon.connection_config
        now = self.daemon.clock.wall_ms()
        ttl = out.ttl_ms if out.ttl_ms is not None else config.default_ttl_ms
        env, wire = seal(self.daemon.identity, typ=out.typ, to=out.to or sink.peer_did or "", body=out.body,
                         now_ms=out.ts_ms if out.ts_ms is not None else now, entropy=self._entropy, ttl=ttl,
                         reply_to=out.reply_to, thread_id=out.thread_id, v=1, profile=config.profile,
                         message_id=out.msg_id, body_bytes=out.body_cbor, ext=out.ext)
        if len(wire) > self.max_msg_size:
            raise MessageTooLarge(len(wire), self.max_msg_size)
        interim = out.typ in _INTERIM
        waiting = self._waiters.get(out.reply_to) if out.reply_to is not None else None
        if waiting:
            if interim:
                return env  # the POST answers with the final word only
            pending = [waiter for waiter in waiting if waiter.raw is None]
            for waiter in pending:  # a POST retried while the first still waits: both get the answer
                waiter.raw = wire
                waiter.done.set()
            if pending:
                return env
        assert sink.peer_did is not None
        if not self.mailboxes.put(sink.peer_did, wire, expires_ms=env.ts + env.ttl, interim=interim, now_ms=now):
            log.debug("interim reply for %s dropped: its mailbox is full", shown(sink.peer_did))
        return env

    # ---------------------------------------------------------------- poll

    def _poll(self, headers: dict[bytes, bytes], query: str) -> bytes:
        principal = self._principal(headers)
        assert principal is not None
        try:
            params = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=8)
        except ValueError:
            raise _Refused(400, 1001, "malformed query string") from None
        cursor = params.get("cursor", [None])[0]
        limit_text = params.get("limit", [None])[0]
        limit: int | None = None
        if limit_text:
            if not limit_text.isascii() or not limit_text.isdigit() or len(limit_text) > 6:
                raise _Refused(400, 1001, "limit must be a small non-negative integer")
            limit = int(limit_text)
        try:
            page = self.mailboxes.poll(principal, cursor, limit, self.daemon.clock.wall_ms())
        except AmpError as exc:
            raise _refusal(exc) from None
        return encode_poll(page.messages, page.next_cursor, page.has_more)

    # ----------------------------------------------------------- WebSocket

    async def _websocket(self, conn: h11.Connection, stream: trio.abc.Stream, request: h11.Request,
                         headers: dict[bytes, bytes]) -> Callable[[], Awaitable[None]]:
        """The upgrade handshake (under the request timeout); returns the
        session, which the caller runs for as long as the WebSocket lives."""
        if headers.get(b"upgrade", b"").lower() != b"websocket":
            raise _Refused(426, 1001, "this endpoint is a WebSocket (RFC 002 §5.1)", close=True)
        principal = self._principal(headers, required=False)
        theirs = _size_header(headers)
        size = max(MIN_MAX_SIZE, min(self.max_msg_size, theirs)) if theirs else self.max_msg_size
        ws = WSConnection(ConnectionType.SERVER)
        try:
            ws.initiate_upgrade_connection(list(request.headers), request.target)
            handshake = next(iter(ws.events()), None)
        except (WsProtocolError, ValueError) as exc:
            # A missing or wrong Sec-WebSocket-* header, or one that is not
            # ASCII (wsproto raises UnicodeDecodeError): both found by fuzzing.
            hint = getattr(getattr(exc, "event_hint", None), "status_code", 400)
            raise _Refused(hint if hint in (400, 426) else 400, 1001, f"not a valid WebSocket upgrade: {exc}",
                           close=True) from None
        if type(handshake) is not Request:
            raise _Refused(400, 1001, "not a valid WebSocket upgrade", close=True)
        if WS_SUBPROTOCOL not in handshake.subprotocols:
            # Appendix A.3: no amp.v1, no WebSocket.
            await stream.send_all(ws.send(RejectConnection(status_code=400, headers=[(b"x-amp-error-code", b"1001")])))
            return _nothing
        await stream.send_all(ws.send(AcceptConnection(
            subprotocol=WS_SUBPROTOCOL, extra_headers=[(MAX_SIZE_HEADER.lower().encode(), str(size).encode())])))
        trailing, _ = conn.trailing_data
        if trailing:
            ws.receive_data(bytes(trailing))
        return functools.partial(self._ws_session, stream, ws, principal, size)

    async def _ws_session(self, stream: trio.abc.Stream, ws: WSConnection, principal: str | None,
                          size: int) -> None:
        """One accepted WebSocket, run by the ordinary connection driver."""
        daemon = self.daemon
        connection = daemon.server_connection(peer_did=principal, framing=Framing.RAW, raw_hello=True,
                                              max_msg_size=size)
        messages = WsMessageStream(stream, ws, max_size=size)
        driver = daemon.driver(connection, messages)

        def close_reason() -> tuple[int, str]:
            term = driver.terminated
            if term is None or term.code is None:
                return 1000, ""
            return close_for_code(term.code), f"{term.code}: {term.reason}"

        messages.close_reason = close_reason
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(messages.keepalive, driver.close,
                                                 interval_s=self.config.ws_ping_interval_s,
                                                 timeout_s=self.config.ws_pong_timeout_s))
            await daemon.serve_driver(driver)
            nursery.cancel_scope.cancel()


async def _nothing() -> None:
    """The session of an upgrade refused during its handshake."""


async def _next_event(conn: h11.Connection, stream: trio.abc.Stream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.they_are_waiting_for_100_continue:
            await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        try:
            data = await stream.receive_some(_READ)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        conn.receive_data(bytes(data))


async def _refuse_malformed(conn: h11.Connection, stream: trio.abc.Stream, exc: h11.RemoteProtocolError,
                            max_head: int) -> None:
    """A request h11 could not parse (its head, or later its body): 400 (414
    for a request line past the head limit, 431 for a head past it), AMP
    1001, and the connection closed, if a response is still ours to send.
    h11 can still send one after the client's error, even before a Request
    (our state IDLE). The rest of what the client sends is read and dropped
    first: closing on unread bytes would reset the connection and lose the
    answer."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    status, message = 400, f"malformed HTTP request: {exc}"
    if exc.error_status_hint == 431:  # h11: a head still incomplete past max_incomplete_event_size
        buffered, _ = conn.trailing_data
        first_line = buffered.split(b"\n", 1)
        status = 414 if len(first_line) == 1 or len(first_line[0]) > max_head // 2 else 431
        message = (f"request target exceeds this server's {max_head // 2}-byte limit" if status == 414 else
                   f"request head exceeds this server's {max_head}-byte limit")
    await _respond(conn, stream, status, 1001, message, close=True)
    await _linger(stream)


def _head_size(request: h11.Request) -> int:
    """About how many bytes the request head took (the line and each header,
    with their separators)."""
    return len(request.method) + len(request.target) + 12 + sum(len(n) + len(v) + 4 for n, v in request.headers)


async def _linger(stream: trio.abc.Stream, *, seconds: float = 2.0, limit: int = 128 << 20) -> None:
    """Read and drop what the client still sends after a refusal (at most
    ``limit`` bytes, ``seconds``), then close: closing with its body unread
    would reset the connection, and the reset can destroy our answer (a 413)
    before the client reads it."""
    with trio.move_on_after(seconds):
        taken = 0
        try:
            while taken < limit:
                data = await stream.receive_some(_READ)
                if not data:
                    return
                taken += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


def _size_header(headers: dict[bytes, bytes]) -> int | None:
    value = headers.get(MAX_SIZE_HEADER.lower().encode())
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or len(text) > 15:
        raise _Refused(400, 1001, f"{MAX_SIZE_HEADER} must be a number of bytes", close=True)
    return int(text)


async def _read_body(conn: h11.Connection, stream: trio.abc.Stream, limit: int,
                     headers: dict[bytes, bytes], account: Callable[[int], None]) -> bytes:
    """The request body, refused with 413 past ``limit`` (from Content-Length
    before reading, or as it arrives); ``account(n)`` is told of each ``n``
    bytes kept (it may refuse them)."""
    length = headers.get(b"content-length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise _Refused(413, 1001, f"body of {int(length)} bytes exceeds this agent's {limit}-byte maximum",
                       close=True)
    return await _drain_body(conn, stream, limit, account)


async def _drain_body(conn: h11.Connection, stream: trio.abc.Stream, limit: int,
                      account: Callable[[int], None] | None = None) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        event = await _next_event(conn, stream)
        if type(event) is h11.Data:
            size += len(event.data)
            if size > limit:
                raise _Refused(413, 1001, f"body exceeds this agent's {limit}-byte maximum", close=True)
            if account is not None:
                account(len(event.data))
            parts.append(bytes(event.data))
        elif type(event) is h11.EndOfMessage:
            return b"".join(parts)
        else:
            raise _Refused(400, 1001, "the request body ended early", close=True)


async def _respond(conn: h11.Connection, stream: trio.abc.Stream, status: int, code: int | None,
                   message: str = "", *, body: bytes | None = None, close: bool = False,
                   max_size: int | None = None) -> None:
    if conn.our_state not in (h11.SEND_RESPONSE, h11.IDLE):  # IDLE: a malformed head, answered anyway
        return
    headers: list[tuple[str, str]] = []
    if body is None:
        body = (message + "\n").encode("utf-8") if message else b""
        if body:
            headers.append(("content-type", "text/plain; charset=utf-8"))
    elif body:
        headers.append(("content-type", CONTENT_TYPE))
    if code is not None:
        headers.append(("x-amp-error-code", str(code)))
    headers.append(("content-length", str(len(body))))
    headers.append((TRANSPORT_VERSION_HEADER.lower(), "1"))
    if max_size is not None:  # §5.3: the largest message this agent accepts
        headers.append((MAX_SIZE_HEADER.lower(), str(max_size)))
    if close:
        headers.append(("connection", "close"))
    data = conn.send(h11.Response(status_code=status, headers=headers))
    if body:
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)
