"""Session-control bodies (RFC 006 §5): the dispatch guard, parsing in the
§9 precedence, and the bodies a provider answers with.

Dispatch guard (§5.1, vector A.14): a message is session control only when
its ``typ`` is REQUEST or RESPONSE *and* its signed body is a map holding
``sess_v``. Anything else, a REQUEST with a business ``op`` among them, is
never parsed here, so it can never draw an RFC 006 1001/1004.

Precedence (§9): shape and type faults of the common fields (1001), then an
unsupported ``sess_v`` (1004), then the op's own shape (1001), then an
unsupported ``thread_mode`` (1004). Authorization and state come after, in
the provider.

Responses (where the RFC names only init's): init is answered ``accept`` or
``reject`` (§5.3), resume ``accept`` with the effective checkpoint (§7.1:
status, checkpoint, replay hint, which is exactly the accept body); update,
suspend and close echo their ``op`` with the session's ``status`` (ampcap's
settlement, docs/sessions.md). A request refused outright (shape, version,
authorization, state) gets an ERROR with the §9 code, the RFC 001 way; an
init the provider declines on policy gets the ``reject`` body with
``reason_code``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import AmpError
from ..schema import Schemas, load_schemas
from ..wire.registry import MessageType
from .record import SESS_V, Checkpoint, SessionRecord, ThreadMode

__all__ = [
    "OPS",
    "REQUEST_OPS",
    "ControlRequest",
    "ControlResponse",
    "is_control",
    "parse_request",
    "parse_response",
    "init_body",
    "op_body",
    "accept_body",
    "reject_body",
    "state_body",
]

INVALID_FORMAT, UNSUPPORTED_VERSION = 1001, 1004
_REQUEST, _RESPONSE = int(MessageType.REQUEST), int(MessageType.RESPONSE)
OPS = ("init", "accept", "reject", "update", "suspend", "resume", "close")
REQUEST_OPS = frozenset({"init", "update", "suspend", "resume", "close"})
SUPPORTED_MODES = frozenset(m.value for m in ThreadMode)


def is_control(typ: int, body: Any) -> bool:
    """The §5.1 dispatch guard."""
    return (typ == _REQUEST or typ == _RESPONSE) and type(body) is dict and "sess_v" in body


class ControlRequest(msgspec.Struct, frozen=True, kw_only=True):
    op: str
    session_id: bytes
    thread_mode: ThreadMode | None = None  # init only; None = not given (coupled)
    participants: tuple[str, ...] | None = None
    expires_in_ms: int | None = None
    purpose: str | None = None
    pin: Mapping[str, str] = msgspec.field(default_factory=dict)
    allow_renegotiate: bool = False
    checkpoint: Checkpoint | None = None
    reason: str | None = None


class ControlResponse(msgspec.Struct, frozen=True, kw_only=True):
    op: str
    session_id: bytes
    status: str | None
    body: Mapping[str, Any]

    @property
    def thread_mode(self) -> ThreadMode | None:
        mode = self.body.get("thread_mode")
        return ThreadMode(mode) if mode in SUPPORTED_MODES else None

    @property
    def expires_at(self) -> int | None:
        value = self.body.get("expires_at")
        return value if type(value) is int else None

    @property
    def pinned(self) -> dict[str, str]:
        pins = self.body.get("pinned_capabilities")
        return dict(pins) if isinstance(pins, dict) else {}


def _check(schemas: Schemas, rule: str, body: Any, prefix: str = "") -> None:
    for v in schemas.validate(rule, body):
        if v.kind == "error":
            raise AmpError(INVALID_FORMAT, f"session control body: {v.path or 'body'} must be {v.expected} "
                                           f"(found {v.found})", path=f"body.{v.path}" if v.path else "body")


def _common(body: Any, schemas: Schemas, ops: frozenset[str] | None) -> str:
    _check(schemas, "session-control-base", body)
    if body["sess_v"] != SESS_V:
        raise AmpError(UNSUPPORTED_VERSION, f"sess_v {body['sess_v']} is not supported (only {SESS_V})",
                       path="body.sess_v")
    op: str = body["op"]
    if ops is not None and op not in ops:
        raise AmpError(INVALID_FORMAT, f"op {op!r} is not a session-control request", path="body.op")
    _check(schemas, f"session-{op}-body", body)
    return op


def parse_request(body: Any, schemas: Schemas | None = None) -> ControlRequest:
    """A REQUEST's control body, checked in the §9 order (1001, 1004)."""
    schemas = schemas or load_schemas()
    op = _common(body, schemas, REQUEST_OPS)
    mode = None
    if "thread_mode" in body:
        if body["thread_mode"] not in SUPPORTED_MODES:
            raise AmpError(UNSUPPORTED_VERSION, "thread_mode is not supported (coupled or independent)",
                           path="body.thread_mode")
        mode = ThreadMode(body["thread_mode"])
    participants = body.get("participants")
    pin = body.get("pin", {})
    # The schema's `* tstr => tstr` lets a map with other keys through (a
    # map may carry keys it does not name): a pin is a name and an id.
    for name, cid in pin.items():
        if type(name) is not str or type(cid) is not str:
            raise AmpError(INVALID_FORMAT, "session control body: pin must map capability names to ids (text)",
                           path="body.pin")
    return ControlRequest(op=op, session_id=body["session_id"], thread_mode=mode,
                          participants=tuple(participants) if participants is not None else None,
                          expires_in_ms=body.get("expires_in_ms"), purpose=body.get("purpose"),
                          pin=dict(pin), allow_renegotiate=body.get("allow_renegotiate", False),
                          checkpoint=Checkpoint.from_wire(body.get("checkpoint")), reason=body.get("reason"))


def parse_response(body: Any, schemas: Schemas | None = None) -> ControlResponse:
    """A RESPONSE's control body (the client side)."""
    schemas = schemas or load_schemas()
    op = body.get("op") if type(body) is dict else None
    if op in ("accept", "reject"):
        _common(body, schemas, None)
    else:
        _check(schemas, "session-control-base", body)
        if body["sess_v"] != SESS_V:
            raise AmpError(UNSUPPORTED_VERSION, f"sess_v {body['sess_v']} is not supported", path="body.sess_v")
    status = body.get("status")
    return ControlResponse(op=body["op"], session_id=body["session_id"],
                           status=status if isinstance(status, str) else None, body=body)


# ------------------------------------------------------------------ bodies


def _base(op: str, session_id: bytes) -> dict[str, Any]:
    return {"sess_v": SESS_V, "op": op, "session_id": session_id}


def init_body(session_id: bytes, participants: list[str], expires_in_ms: int, *,
              thread_mode: ThreadMode | None = None, purpose: str | None = None,
              pin: Mapping[str, str] | None = None) -> dict[str, Any]:
    body = _base("init", session_id)
    body["participants"] = list(participants)
    body["expires_in_ms"] = expires_in_ms
    if thread_mode is not None:
        body["thread_mode"] = thread_mode.value
    if purpose is not None:
        body["purpose"] = purpose
    if pin:
        body["pin"] = dict(pin)
    return body


def op_body(op: str, session_id: bytes, **fields: Any) -> dict[str, Any]:
    """update / suspend / resume / close, with the fields given (None left out)."""
    body = _base(op, session_id)
    for key, value in fields.items():
        if value is not None:
            body[key] = value.to_wire() if isinstance(value, Checkpoint) else value
    return body


def accept_body(record: SessionRecord, *, checkpoint: Checkpoint | None = None,
                replay_after: bytes | None = None) -> dict[str, Any]:
    body = _base("accept", record.session_id)
    body.update(thread_mode=record.thread_mode.value, status="active", expires_at=record.expires_at)
    if checkpoint is not None and checkpoint.to_wire():
        body["checkpoint"] = checkpoint.to_wire()
    if record.pinned:
        body["pinned_capabilities"] = dict(record.pinned)
    if replay_after is not None:
        body["replay_after_msg_id"] = replay_after
    return body


def reject_body(session_id: bytes, code: int, reason: str) -> dict[str, Any]:
    body = _base("reject", session_id)
    body.update(status="failed", reason_code=code, reason=reason)
    return body


def state_body(op: str, record: SessionRecord) -> dict[str, Any]:
    """The answer to update / suspend / close: the op echoed, the session's state."""
    body = _base(op, record.session_id)
    body.update(status=record.status.value, expires_at=record.expires_at)
    if record.suspended_at is not None:
        body["suspended_at"] = record.suspended_at
    if record.closed_at is not None:
        body["closed_at"] = record.closed_at
    if record.pinned:
        body["pinned_capabilities"] = dict(record.pinned)
    return body
