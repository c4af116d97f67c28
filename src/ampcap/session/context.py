"""Session context carriage (RFC 006 §4.4) and provisional-reply correlation (§6).

:func:`read_context` is the shape check of ``body.session`` (1001 for a
non-map, a ``session_id`` that is not 16 bytes, a ``session_scope`` that is
not ``true``). :func:`scope_of` decides whether a received non-control
message is session-scoped and, if so, binds it to a live session: a message
enters session-scoped validation only through a signed ``session_scope =
true``; a ``thread_id`` that happens to name a live session never does by
itself, and such a message without the marker is refused (4001) rather
than guessed at.

:class:`RequestTracker` follows the session-scoped requests a client has in
flight (the §8.2 table) and checks each reply: provisional ones must carry
``reply_to`` (A.4), the signed session context (A.15: no fallback to
``thread_id``/``reply_to`` alone), the same session, and in independent mode
the triggering request's ``thread_id`` (A.4b); in coupled mode ``thread_id``
is the session id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.envelope import Envelope
from ..wire.registry import MessageType
from .record import SessionRecord, ThreadMode
from .state import RequestInput, RequestState, SessionState, advance_request

__all__ = ["read_context", "scope_of", "session_context", "InFlight", "RequestTracker", "PROVISIONAL"]

INVALID_FORMAT, BAD_REQUEST = 1001, 4001
PROVISIONAL = frozenset({int(MessageType.PROCESSING), int(MessageType.PROGRESS), int(MessageType.INPUT_REQUIRED)})
_ERROR = int(MessageType.ERROR)


def session_context(session_id: bytes) -> dict[str, Any]:
    """The signed ``body.session`` of a session-scoped message."""
    return {"session_id": session_id, "session_scope": True}


def read_context(body: Any) -> tuple[bytes | None, bool]:
    """``(session_id, scoped)`` from ``body.session``; 1001 when malformed."""
    if type(body) is not dict or "session" not in body:
        return None, False
    ctx = body["session"]
    if type(ctx) is not dict:
        raise AmpError(INVALID_FORMAT, "body.session must be a map", path="body.session")
    sid = ctx.get("session_id")
    if "session_id" in ctx and not (type(sid) is bytes and len(sid) == 16):
        raise AmpError(INVALID_FORMAT, "body.session.session_id must be 16 bytes", path="body.session.session_id")
    if "session_scope" in ctx and ctx["session_scope"] is not True:
        raise AmpError(INVALID_FORMAT, "body.session.session_scope must be true", path="body.session.session_scope")
    return sid, ctx.get("session_scope") is True


def scope_of(env: Envelope, body: Any, sessions: Mapping[bytes, SessionRecord]) -> SessionRecord | None:
    """The live session a received non-control, non-reply message is scoped
    to, or None for plain application payload; AmpError 1001/4001 per §4.4/§9."""
    sid, scoped = read_context(body)
    if not scoped:
        if env.thread_id is not None:
            record = sessions.get(env.thread_id)
            if record is not None and record.live:
                raise AmpError(BAD_REQUEST, "thread_id names a session but body.session.session_scope is missing",
                               path="body.session")
        return None
    if sid is None:
        raise AmpError(BAD_REQUEST, "session-scoped message without body.session.session_id",
                       path="body.session.session_id")
    record = sessions.get(sid)
    if record is None or record.terminal or record.status is SessionState.PENDING:
        # §12: no hint whether the session exists for someone else.
        raise AmpError(BAD_REQUEST, "unknown or ended session", path="body.session.session_id")
    if record.status is SessionState.SUSPENDED:
        raise AmpError(BAD_REQUEST, "the session is suspended: resume it first", path="body.session.session_id")
    if record.thread_mode is ThreadMode.COUPLED and env.thread_id != sid:
        raise AmpError(BAD_REQUEST, "coupled session: thread_id must equal body.session.session_id",
                       path="thread_id")
    return record


class InFlight(msgspec.Struct):
    request_id: bytes
    session_id: bytes
    thread_id: bytes | None
    mode: ThreadMode
    state: RequestState = RequestState.EXECUTING


class RequestTracker:
    """A client's session-scoped requests awaiting their terminal reply."""

    def __init__(self, max_in_flight: int = 100_000) -> None:
        self.max_in_flight = max_in_flight
        self._flights: dict[bytes, InFlight] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def sent(self, request_id: bytes, session_id: bytes, thread_id: bytes | None, mode: ThreadMode) -> None:
        if len(self._flights) >= self.max_in_flight:
            raise AmpError(5004, "too many session-scoped requests in flight")
        self._flights[request_id] = InFlight(request_id, session_id, thread_id, mode)

    def forget(self, request_id: bytes) -> None:
        self._flights.pop(request_id, None)

    def knows(self, request_id: bytes | None) -> bool:
        return request_id is not None and request_id in self._flights

    def on_reply(self, env: Envelope, body: Any) -> InFlight | None:
        """Check a reply; the request it answers (None: not one of ours).
        AmpError (1001/4001) when it breaks §4.4/§6; the request stays in flight."""
        typ = env.typ
        if env.reply_to is None:
            if typ in PROVISIONAL and read_context(body)[1]:
                raise AmpError(BAD_REQUEST, "session-scoped provisional reply without reply_to", path="reply_to")
            return None
        flight = self._flights.get(env.reply_to)
        if flight is None:
            return None
        if typ == _ERROR:  # a rejection (RFC 001 §15) carries no session context
            flight.state = advance_request(flight.state, RequestInput.REJECT)
            del self._flights[env.reply_to]
            return flight
        sid, scoped = read_context(body)
        if typ in PROVISIONAL and not scoped:
            raise AmpError(BAD_REQUEST, "provisional reply to a session-scoped request without "
                                        "body.session.session_scope", path="body.session")
        if scoped and sid != flight.session_id:
            raise AmpError(BAD_REQUEST, "reply names another session", path="body.session.session_id")
        if flight.mode is ThreadMode.COUPLED:
            if env.thread_id != flight.session_id:
                raise AmpError(BAD_REQUEST, "coupled session: thread_id must equal the session id", path="thread_id")
        elif flight.thread_id is not None and env.thread_id != flight.thread_id:
            raise AmpError(BAD_REQUEST, "reply does not keep the request's thread_id", path="thread_id")
        if typ in PROVISIONAL:
            flight.state = advance_request(flight.state, RequestInput.PROVISIONAL)
        else:
            flight.state = advance_request(advance_request(flight.state, RequestInput.TERMINAL), RequestInput.FINISH)
            del self._flights[env.reply_to]
        return flight
