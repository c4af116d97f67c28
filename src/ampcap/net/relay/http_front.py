"""The relay's RFC 002 HTTP endpoints, on the daemon's HTTP front (h11,
wsproto, the R21 bearer token, the same limits and refusals):

* ``POST /amp/v1/messages``: the body goes to ``RelayCore.submit`` with the
  token's principal (who is thereby registered); the answer is the relay's
  signed relay ACK (202) or its signed ERROR, with the status of its code.
  A HELLO POSTed without a token gets HELLO_ACK (how a client learns the
  relay's DID, the token's ``aud``). Accepted is ``202`` (the answer comes
  later), with the relay ACK as the body.
* ``GET /amp/v1/messages?cursor=&limit=``: ``RelayCore.poll``, the §6.2
  wrapper with the raw bytes (a cursor the relay did not issue: 400, 1001).
* ``GET /amp/v1/ws``: a WebSocket run as a relay link (HELLO registers).
* ``POST /amp/v1/relay/forward`` and ``/commit`` (§6.5, §6.6): the core
  answers with the response body; only a trusted relay named in the
  wrapper is answered (3001, 403).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs

import h11
import trio

from ...errors import AmpError
from ...wire.cbor import loads
from ...wire.httpmap import status_for_code
from ...wire.registry import MessageType
from ..transport.http_server import (HttpConfig, HttpFront, _drain_body, _not_served, _read_body, _Refused,
                                    _refusal, _respond)
from ..transport.listener import open_listeners
from ..transport.url import MESSAGES_PATH, WS_PATH
from .posting import COMMIT_PATH, FORWARD_PATH

if TYPE_CHECKING:
    import ssl

    from ..daemon.ports import InboundPort
    from .server import RelayServer

__all__ = ["RelayHttpFront"]

_FEDERATION = (FORWARD_PATH, COMMIT_PATH)
_HELLO = int(MessageType.HELLO)
_HELLO_TYP = b"ctyp\x18" + bytes([_HELLO])  # CBOR "typ": 0x70, as a HELLO carries it


def _federation_status(body: bytes) -> int:
    """RFC 002 §6.5/§6.6 response body -> HTTP status (its ``error_code``)."""
    try:
        value: Any = loads(body)
    except AmpError:
        return 500
    code = value.get("error_code") if isinstance(value, dict) else None
    if not isinstance(code, int):
        return 200
    return {3001: 403, 2003: 429}.get(code, 400 if code < 2000 else 500)


class RelayHttpFront(HttpFront):
    """:class:`HttpFront` with the relay's routes (see the module docstring)."""

    def __init__(self, relay: RelayServer, *, ssl_context: ssl.SSLContext | None = None,
                 config: HttpConfig = HttpConfig()) -> None:
        # The relay offers what the front's token check, HELLO answer and
        # WebSocket use (identity, clock, pipeline, connection_config,
        # server_connection, driver, serve_driver); the executor and
        # deliver, which only the daemon's routes use, are never reached here.
        super().__init__(cast("InboundPort", relay), ssl_context=ssl_context, config=config, entropy=relay.entropy)
        self.relay = relay

    async def serve(self, host: str, port: int, *,
                    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await open_listeners(host, port, backlog=4096)
        async with trio.open_nursery() as nursery:
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery, task_status=task_status)

    async def _route(self, conn: h11.Connection, stream: trio.abc.Stream,
                     request: h11.Request) -> Callable[[], Awaitable[None]] | None:
        target = request.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        headers = {name.lower(): value for name, value in request.headers}
        try:
            if path == MESSAGES_PATH and request.method == b"POST":
                status, body, code = await self._relay_post(conn, stream, headers)
                await self._answer(conn, stream, status, code, body)
            elif path == MESSAGES_PATH and request.method == b"GET":
                await _drain_body(conn, stream, 0)
                await self._answer(conn, stream, 200, None, self._relay_poll(headers, query))
            elif path == WS_PATH and request.method == b"GET":
                return await self._websocket(conn, stream, request, headers)
            elif path in _FEDERATION and request.method == b"POST":
                principal = self._principal(headers)
                body = await _read_body(conn, stream, self.max_msg_size + 4096, headers, lambda n: None)
                now = self.relay.clock.wall_ms()
                core = self.relay.core
                handler = core.receive_forward if path == FORWARD_PATH else core.receive_commit_report
                answer, actions = handler(body, principal=principal, now=now)
                self.relay.perform(actions)
                await self._answer(conn, stream, _federation_status(answer), None, answer)
            else:
                raise _not_served(request.method, path, known=path in (MESSAGES_PATH, WS_PATH, *_FEDERATION),
                                  what="relay")
        except _Refused as refused:
            await _respond(conn, stream, refused.status, refused.code, refused.message, close=refused.close,
                           max_size=self.max_msg_size)
        return None

    async def _answer(self, conn: h11.Connection, stream: trio.abc.Stream, status: int, code: int | None,
                      body: bytes) -> None:
        await _respond(conn, stream, status, code, body=body, max_size=self.max_msg_size)

    async def _relay_post(self, conn: h11.Connection, stream: trio.abc.Stream,
                          headers: dict[bytes, bytes]) -> tuple[int, bytes, int | None]:
        principal = self._principal(headers, required=False)
        limit = self.max_msg_size if principal is not None else 64 * 1024
        data = await _read_body(conn, stream, limit, headers, lambda n: None)
        relay = self.relay
        if principal is None:
            # Without a token only a HELLO (signed: it proves its sender) is answered.
            now = relay.clock.wall_ms()
            try:
                inbound = relay.pipeline.check(data, now)
            except AmpError as exc:
                raise _refusal(exc, authenticated=False) from None
            if inbound.envelope.typ != _HELLO:
                raise _Refused(401, 3001, "missing Authorization: Bearer <token> (ruling R21)")
            return 200, self._hello_answer(inbound.envelope, inbound.body, now), None
        # A HELLO is for the relay itself: answered, not carried. The bytes
        # test is a cheap filter; a false match costs one check.
        if _HELLO_TYP in data:
            now = relay.clock.wall_ms()
            try:
                inbound = relay.pipeline.check(data, now)
            except AmpError as exc:
                raise _refusal(exc) from None
            if inbound.envelope.typ == _HELLO:
                if inbound.envelope.sender != principal:
                    raise _Refused(403, 3001, "from differs from the bearer token's principal (RFC 002 §7.1)")
                relay.register(principal, now)
                return 200, self._hello_answer(inbound.envelope, inbound.body, now), None
        replies, refused = relay.http_submit(data, principal)
        own = [r for r in replies if r.to == principal]
        body = own[0].raw if own else b""
        if refused is not None:
            return status_for_code(refused), body, refused
        # Accepted is 202 (RFC 002 §6.1: the answer comes later, by a poll or
        # a push); the body is the relay's signed relay ACK, its receipt.
        return 202, body, None

    def _relay_poll(self, headers: dict[bytes, bytes], query: str) -> bytes:
        principal = self._principal(headers)
        assert principal is not None
        try:
            params = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=8)
        except ValueError:
            raise _Refused(400, 1001, "malformed query string") from None
        cursor = params.get("cursor", [None])[0] or None
        limit_text = params.get("limit", [None])[0]
        limit = 100
        if limit_text:
            if not limit_text.isascii() or not limit_text.isdigit() or len(limit_text) > 6:
                raise _Refused(400, 1001, "limit must be a small non-negative integer")
            limit = int(limit_text)
        relay = self.relay
        now = relay.clock.wall_ms()
        relay.register(principal, now)
        try:
            page = relay.core.poll(principal, cursor, limit, now)
        except AmpError as exc:
            raise _refusal(exc) from None
        relay.perform(list(page.actions))  # committed already: a commit report is posted in its own task
        return page.body

