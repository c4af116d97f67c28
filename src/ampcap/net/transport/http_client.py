"""Dialling ``https://`` / ``wss://`` (and ``http://`` / ``ws://``): RFC 002 §5–§6 as a client.

Both bindings end up as an ordinary daemon :class:`~ampcap.net.daemon.link.Link`: the
sans-I/O Connection in its message mode (``Framing.RAW`` with HELLO first)
over a stream that maps each length-prefixed message to the binding's unit.
So the Python API, ``query``, ``invoke``, ``interop`` and ``serve
--connect`` work over them unchanged, with the invoker's timeouts and
retries.

* WebSocket: :class:`~.wsmessages.WsMessageStream` after the upgrade.
* HTTP: :class:`HttpMessageStream`. Each message is one ``POST
  /amp/v1/messages`` (concurrently, over keep-alive connections: net/transport/httppool.py). A
  ``200`` body is the reply. After a ``202`` the stream polls ``GET
  /amp/v1/messages?cursor=…`` (short intervals growing to half a second)
  until every such message has had its final reply or has expired; the
  invoker's deadline bounds the wait. A refused POST (§6.4: 401/403 → 3001,
  413 → 1001, 429/503 → 2003, …) ends that one call with the mapped code.
  HELLO goes first, without a token unless the peer's DID was given: its
  HELLO_ACK tells us the DID the R21 bearer token must name as ``aud``.

Given several endpoints for one peer, :func:`connect_any` tries them in
RFC 002 §3.5 order (``amps > wss > https``), moving on only when one cannot
be reached at all.
"""

from __future__ import annotations

import logging
import ssl
from urllib.parse import quote
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from ...display import shown
from ...errors import AmpError, Unreachable
from ...peer.config import ConnectionConfig
from ...wire.bearer import DEFAULT_LIFETIME_S, mint
from ...wire.cbor import DEFAULT_LIMITS
from ...wire.envelope import decode_envelope
from ...wire.frames import Framing
from ...wire.httpmap import CONTENT_TYPE, TRANSPORT_VERSION_HEADER, code_for_status, decode_poll
from ...wire.identity import Identity
from ...wire.registry import MessageType
from .httppool import HttpFailure, HttpPool
from .stream import open_stream
from .tls import tls_failure
from .url import MESSAGES_PATH, AmpUrl, format_hostport

if TYPE_CHECKING:
    from ..daemon.link import Link
    from ..daemon.ports import Dialer, StreamConnector
    from .wsmessages import WsMessageStream

__all__ = ["dial", "connect_any", "HttpMessageStream"]

log = logging.getLogger("ampcap.http")

_HELLO = int(MessageType.HELLO)
_INTERIM = frozenset(int(t) for t in (MessageType.PROCESSING, MessageType.PROGRESS, MessageType.ACK))
_ANSWERS = frozenset(int(t) for t in (MessageType.ACK, MessageType.PROCESSING, MessageType.PROGRESS,
                                      MessageType.ERROR, MessageType.CAP_RESULT, MessageType.CAP_DECLARE,
                                      MessageType.PONG, MessageType.HELLO_ACK, MessageType.HELLO_REJECT))
_POLL_MIN_S, _POLL_MAX_S = 0.02, 0.5
_POOL = 64  # concurrent POSTs (keep-alive connections)


def message_mode(config: ConnectionConfig) -> ConnectionConfig:
    """``config`` for a binding that carries one message per unit: no
    HANDSHAKE frame, HELLO first (RFC 002 §3.3)."""
    return replace(config, framing=Framing.RAW, raw_hello=True)


async def connect_any(daemon: Dialer, urls: list[AmpUrl], **kwargs: Any) -> Link:
    """Dial the first of ``urls`` (already in §3.5 order) that can be reached."""
    failure: AmpError | None = None
    for url in urls:
        try:
            return await daemon.connect(url, **kwargs)
        except Unreachable as exc:
            log.info("endpoint %s unreachable (%s); trying the next", url, shown(exc.message))
            failure = exc
    assert failure is not None
    raise failure


async def dial(daemon: StreamConnector, url: AmpUrl, *, peer_did: str | None, ssl_context: ssl.SSLContext | None,
               timeout_s: float, config: ConnectionConfig | None) -> Link:
    """Open a Link to ``url`` over HTTP or WebSocket; ``AmpError`` naming the URL."""
    conf = message_mode(config or daemon.connection_config)
    try:
        if url.binding == "ws":
            stream = await _open_ws(daemon, url, peer_did=peer_did, ssl_context=ssl_context,
                                    timeout_s=timeout_s, max_size=conf.max_msg_size)
            link = await daemon.connect_stream(stream, peer_did=peer_did, timeout_s=timeout_s, config=conf)
            assert daemon.calls.nursery is not None
            daemon.calls.nursery.start_soon(stream.keepalive, link.driver.close)  # ends with the stream
            return link
        http = HttpMessageStream(url, identity=daemon.identity, clock_ms=daemon.clock.wall_ms,
                                 ssl_context=ssl_context, peer_did=peer_did, timeout_s=timeout_s,
                                 max_size=conf.max_msg_size, on_refused=daemon.calls.fail)
        assert daemon.calls.nursery is not None, "start the daemon first"
        await daemon.calls.nursery.start(http.run)
        try:
            link = await daemon.connect_stream(http, peer_did=peer_did, timeout_s=timeout_s, config=conf)
        except AmpError:
            if http.failure is not None:
                raise http.failure from None
            raise
        http.audience = link.peer_did
        return link
    except Unreachable:
        raise
    except AmpError as exc:
        raise AmpError(exc.code, f"{url}: {exc.message}") from None


async def _open_ws(daemon: StreamConnector, url: AmpUrl, *, peer_did: str | None, ssl_context: ssl.SSLContext | None,
                   timeout_s: float, max_size: int) -> WsMessageStream:

    stream: trio.abc.Stream | None = None
    with trio.move_on_after(timeout_s):
        try:
            stream = await open_stream(url, ssl_context=ssl_context)
        except (OSError, UnicodeError) as exc:
            raise Unreachable(str(url), getattr(exc, "strerror", None) or str(exc)) from exc
    if stream is None:
        raise AmpError(5003, f"connecting to {url} timed out")
    from .wsmessages import WsMessageStream, client_handshake

    token = None
    if peer_did is not None:
        token = mint(daemon.identity, peer_did, now_ms=daemon.clock.wall_ms(), entropy=daemon.entropy)
    try:
        ws = await client_handshake(stream, format_hostport(url.host, url.port), token=token, max_size=max_size,
                                    timeout_s=timeout_s)
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(stream)
        raise AmpError(5002, tls_failure(exc) or "the connection broke during the WebSocket handshake") from None
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return WsMessageStream(stream, ws, max_size=max_size)


class HttpMessageStream(trio.abc.Stream):
    """Length-prefixed AMP messages in and out; POSTs and polls on the wire."""

    def __init__(self, url: AmpUrl, *, identity: Identity, clock_ms: Callable[[], int],
                 ssl_context: ssl.SSLContext | None, peer_did: str | None, timeout_s: float, max_size: int,
                 on_refused: Callable[[bytes, AmpError], None], entropy: Callable[[int], bytes] | None = None) -> None:
        import os

        self._url = url
        self._identity = identity
        self._clock = clock_ms
        self._ssl = ssl_context
        self._timeout = timeout_s
        self._max = max_size
        self._on_refused = on_refused
        self._entropy = entropy or os.urandom
        self.audience = peer_did  # the server's DID: the token's aud (learnt from HELLO_ACK otherwise)
        self._token: tuple[str, int] | None = None  # (token, when to renew it, ms)
        self._in = bytearray()
        self._readable = trio.Event()
        self._out = bytearray()
        self._ended = False
        self.failure: AmpError | None = None  # why the link could not open (HELLO refused)
        self._outstanding: dict[bytes, int] = {}  # 202'd message id -> when to stop waiting (ms)
        self._poll_kick = trio.Event()
        self._cursor: str | None = None
        self._nursery: trio.Nursery | None = None
        self._client: HttpPool | None = None
        self.posts = 0
        self.polls = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._client = HttpPool(self._url, ssl_context=self._ssl, max_connections=_POOL,
                                max_body=self._max + 4096, timeout_s=self._timeout)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._poller)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._end()
            with trio.CancelScope(shield=True):
                await self._client.aclose()

    # ---------------------------------------------------------- input

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._in:
            if self._ended:
                return b""
            self._readable = trio.Event()
            await self._readable.wait()
        size = len(self._in) if max_bytes is None else min(max_bytes, len(self._in))
        chunk = bytes(self._in[:size])
        del self._in[:size]
        return chunk

    def _feed(self, raw: bytes) -> None:
        self._in += len(raw).to_bytes(4, "big")
        self._in += raw
        self._readable.set()

    def _end(self) -> None:
        self._ended = True
        self._readable.set()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # --------------------------------------------------------- output

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._ended or self._nursery is None:
            raise trio.ClosedResourceError("the HTTP link is closed")
        buf = self._out
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if len(buf) - pos - 4 < size:
                break
            self._nursery.start_soon(self._post, bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        del buf[:pos]

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    def _bearer(self) -> str | None:
        if self.audience is None:
            return None
        now = self._clock()
        if self._token is None or now >= self._token[1]:
            token = mint(self._identity, self.audience, now_ms=now, entropy=self._entropy)
            self._token = (token, now + (DEFAULT_LIFETIME_S - 60) * 1000)
        return self._token[0]

    def _headers(self) -> dict[str, str]:
        headers = {"accept": CONTENT_TYPE, TRANSPORT_VERSION_HEADER: "1"}
        token = self._bearer()
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return headers

    async def _post(self, payload: bytes) -> None:
        env = decode_envelope(payload, DEFAULT_LIMITS)  # our own message: it decodes
        assert self._client is not None
        headers = self._headers()
        headers["content-type"] = CONTENT_TYPE
        self.posts += 1
        try:
            response = await self._client.request("POST", MESSAGES_PATH, headers, payload)
        except HttpFailure as exc:
            if exc.connect and env.typ == _HELLO:
                self._refused(env.id, env.typ, Unreachable(str(self._url), str(exc)))  # the next endpoint may do
            else:
                self._refused(env.id, env.typ, AmpError(5002, f"POST {MESSAGES_PATH} failed: {shown(str(exc))}"))
            return
        status = response.status
        if status == 200:
            if response.body:
                self._feed(response.body)
            return
        if status == 202:
            if env.typ not in _ANSWERS:
                self._outstanding[env.id] = env.ts + env.ttl
                self._poll_kick.set()
            return
        code = _header_code(response.headers) or code_for_status(status) or 1001
        text = response.body.decode("utf-8", "replace").strip()
        text = text.splitlines()[0] if text else ""
        self._refused(env.id, env.typ, AmpError(code, f"HTTP {status}" + (f": {shown(text)}" if text else "")))

    def _refused(self, msg_id: bytes, typ: int, err: AmpError) -> None:
        if typ == _HELLO:
            self.failure = err  # nothing will answer the HELLO: the link cannot open
            self._end()
        else:
            self._on_refused(msg_id, err)

    # ---------------------------------------------------------- polling

    async def _poller(self) -> None:
        delay = _POLL_MIN_S
        while True:
            if not self._outstanding:
                self._poll_kick = trio.Event()
                await self._poll_kick.wait()
                delay = _POLL_MIN_S
            assert self._client is not None
            target = f"{MESSAGES_PATH}?limit=100" + (f"&cursor={quote(self._cursor)}" if self._cursor else "")
            self.polls += 1
            try:
                response = await self._client.request("GET", target, self._headers())
                if response.status != 200:
                    raise AmpError(code_for_status(response.status) or 1001, f"poll answered HTTP {response.status}")
                messages, cursor, more = decode_poll(response.body)
            except (HttpFailure, AmpError) as exc:
                log.info("poll of %s failed: %s", self._url, shown(str(exc)))
                messages, cursor, more = [], self._cursor, False
                delay = _POLL_MAX_S
            if cursor is not None:
                self._cursor = cursor
            for raw in messages:
                self._note_reply(raw)
                self._feed(raw)
            now = self._clock()
            for msg_id, until in list(self._outstanding.items()):
                if until <= now:
                    del self._outstanding[msg_id]
            if more:
                continue
            if messages:
                delay = _POLL_MIN_S
            await trio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX_S)

    def _note_reply(self, raw: bytes) -> None:
        try:
            env = decode_envelope(raw, DEFAULT_LIMITS)
        except AmpError:
            return  # the Connection refuses it and says so
        if env.reply_to is not None and env.typ not in _INTERIM:
            self._outstanding.pop(env.reply_to, None)

    # ---------------------------------------------------------- close

    async def send_eof(self) -> None:  # pragma: no cover - not a HalfCloseableStream user
        raise NotImplementedError

    async def aclose(self) -> None:
        self._end()
        await trio.lowlevel.checkpoint()


def _header_code(headers: dict[str, str]) -> int | None:
    value = headers.get("x-amp-error-code")
    if value is None or not value.isdigit() or len(value) > 5:
        return None
    return int(value)

