"""RFC 006 sessions in the dump: which session each message belongs to.

A message belongs to a session when it is a session-control REQUEST or
RESPONSE (signed body with ``sess_v`` and ``session_id``, §5.1), when it
carries a ``body.session`` context with a 16-byte ``session_id`` (§4.4),
or when it replies to a message that belongs to one (a CAP_RESULT, an
ERROR, a PROGRESS: ``reply_to`` names the request). ``thread_id`` alone
never places a message in a session (§4.4: it does not establish scope).

The answer to an INPUT_REQUIRED travels as ampcap settled it
(docs/sessions.md): a RESPONSE whose ``reply_to`` is the INPUT_REQUIRED's
id, body ``{"answer": text}`` or ``{"declined": true}``. Such a RESPONSE is
marked (``input_answer``) so the dump says what it is rather than "a
RESPONSE without a REQUEST".

Memory is bounded: message ids are remembered up to ``max_ids``, sessions
counted up to ``max_sessions`` (beyond: "other").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..wire.registry import MessageType
from .records import Record

__all__ = ["SessionTracker", "SessionStats"]

_REQUEST, _RESPONSE = int(MessageType.REQUEST), int(MessageType.RESPONSE)
_INPUT_REQUIRED = int(MessageType.INPUT_REQUIRED)


@dataclass(slots=True)
class SessionStats:
    messages: int = 0
    ops: list[str] = field(default_factory=list)  # control ops in order (at most 32 kept)
    status: str | None = None  # the last status a control message stated


def _session_of(rec: Record) -> tuple[bytes | None, str | None]:
    """(session id, control op or None) read from the record's own body."""
    body = rec.body
    if not rec.body_known or type(body) is not dict:
        return None, None
    if rec.typ in (_REQUEST, _RESPONSE) and "sess_v" in body:
        sid = body.get("session_id")
        op = body.get("op")
        if type(sid) is bytes and len(sid) == 16:
            return sid, op if isinstance(op, str) else "?"
    ctx = body.get("session")
    if type(ctx) is dict:
        sid = ctx.get("session_id")
        if type(sid) is bytes and len(sid) == 16:
            return sid, None
    return None, None


class SessionTracker:
    """Feed records in capture order (after the correlator); it fills
    ``rec.session``, ``rec.session_op`` and ``rec.input_answer``."""

    def __init__(self, max_ids: int = 100_000, max_sessions: int = 10_000) -> None:
        self._by_id: OrderedDict[bytes, Any] = OrderedDict()  # message id -> session id
        self._asked: OrderedDict[bytes, Any] = OrderedDict()  # INPUT_REQUIRED ids
        self._max_ids = max_ids
        self._max_sessions = max_sessions
        self.sessions: dict[str, SessionStats] = {}

    def add(self, rec: Record) -> None:
        sid, op = _session_of(rec)
        if sid is None and rec.reply_to is not None:
            sid = self._by_id.get(rec.reply_to)
        if rec.typ == _RESPONSE and rec.reply_to is not None and rec.reply_to in self._asked and op is None:
            rec.input_answer = True
            rec.notes.append("the caller's answer to INPUT_REQUIRED (RFC 006 §6.3; ampcap's carriage: a RESPONSE "
                             "whose reply_to is the question)")
        if rec.typ == _INPUT_REQUIRED and rec.id is not None:
            self._remember(self._asked, rec.id, None)
        if sid is None:
            return
        rec.session = sid.hex()
        rec.session_op = op
        if rec.id is not None:
            self._remember(self._by_id, rec.id, sid)
        key = rec.session if rec.session in self.sessions or len(self.sessions) < self._max_sessions else "other"
        stats = self.sessions.setdefault(key, SessionStats())
        stats.messages += 1
        if op is not None and len(stats.ops) < 32:
            stats.ops.append(op)
        status = rec.body.get("status") if op is not None and type(rec.body) is dict else None
        if isinstance(status, str) and status in ("pending", "active", "suspended", "closing", "closed", "expired",
                                                  "failed"):
            stats.status = status

    def _remember(self, table: OrderedDict[bytes, Any], key: bytes, value: Any) -> None:
        table[key] = value
        if len(table) > self._max_ids:
            table.popitem(last=False)
