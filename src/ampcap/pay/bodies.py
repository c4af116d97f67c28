"""The RFC 007 §5.11 bodies on the CAP path (§5.10): request bodies read
from ``CAP_INVOKE.params`` into typed, immutable requests, and response
bodies built for ``CAP_RESULT.result``.

Reading follows the §8 precedence: a value that is not a map, a missing or
mistyped ``pay_v``/``op``/``payment_id`` or field: 1001; ``pay_v`` other
than 1: 1004; an ``op`` RFC 007 does not define: 4105; a response ``op``
sent as a request (the CAP path carries request bodies only): 4001;
non-canonical money: 4001. Unknown optional keys are ignored (§9), so they
are not part of the request's semantic identity either.

The dispatch guard (§5.1, A.9) is :func:`is_payment_control`: a body is
payment-control only when it is a map holding ``pay_v``; a business ``op``
alone does not make it one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.cbor import dumps
from .codes import BAD_REQUEST, MALFORMED, UNKNOWN_OPERATION, UNSUPPORTED_VERSION
from .money import Money, parse_money

__all__ = ["PAY_V", "REQUEST_OPS", "RESPONSE_OPS", "RESPONSE_OF", "SessionContext", "PaymentRequest",
           "QuoteRequest", "Authorize", "Capture", "Cancel", "Refund", "StatusQuery", "is_payment_control",
           "parse_request", "semantic_digest", "response_base"]

PAY_V = 1
REQUEST_OPS = ("quote_request", "authorize", "capture", "cancel", "refund", "status_query")
RESPONSE_OPS = ("quote", "authorize_result", "capture_result", "cancel_result", "refund_result", "status")
RESPONSE_OF = dict(zip(REQUEST_OPS, RESPONSE_OPS))
_MAX_TEXT = 4096  # reasons, service refs and DIDs: a payee keeps them, so they are bounded


class SessionContext(msgspec.Struct, frozen=True, gc=False):
    """``payment-session-context`` (§4.3): RFC 006 session carried in the body."""

    session_id: bytes

    def to_wire(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "session_scope": True}


class PaymentRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Fields every request body has (``payment-base``)."""

    payment_id: bytes
    session: SessionContext | None = None

    op = ""  # each subclass names its op

    def fields(self) -> dict[str, Any]:
        """The op-specific fields, as the wire has them (no None)."""
        return {}

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pay_v": PAY_V, "op": self.op, "payment_id": self.payment_id}
        if self.session is not None:
            out["session"] = self.session.to_wire()
        out.update(self.fields())
        return out


class QuoteRequest(PaymentRequest, frozen=True, kw_only=True):
    op = "quote_request"
    payee: str
    money: Money
    service_ref: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"payee": self.payee, "money": self.money.to_wire()}
        if self.service_ref is not None:
            out["service_ref"] = self.service_ref
        return out


class Authorize(PaymentRequest, frozen=True, kw_only=True):
    op = "authorize"
    quote_id: bytes
    payer: str
    payee: str
    money: Money

    def fields(self) -> dict[str, Any]:
        return {"quote_id": self.quote_id, "payer": self.payer, "payee": self.payee, "money": self.money.to_wire()}


class Capture(PaymentRequest, frozen=True, kw_only=True):
    op = "capture"
    quote_id: bytes
    money: Money

    def fields(self) -> dict[str, Any]:
        return {"quote_id": self.quote_id, "money": self.money.to_wire()}


class Cancel(PaymentRequest, frozen=True, kw_only=True):
    op = "cancel"
    reason: str | None = None

    def fields(self) -> dict[str, Any]:
        return {} if self.reason is None else {"reason": self.reason}


class Refund(PaymentRequest, frozen=True, kw_only=True):
    op = "refund"
    money: Money | None = None
    reason: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.money is not None:
            out["money"] = self.money.to_wire()
        if self.reason is not None:
            out["reason"] = self.reason
        return out


class StatusQuery(PaymentRequest, frozen=True, kw_only=True):
    op = "status_query"


def is_payment_control(body: Any) -> bool:
    """§5.1 dispatch guard (A.9): only a map with ``pay_v`` is payment-control."""
    return isinstance(body, Mapping) and "pay_v" in body


def semantic_digest(request: PaymentRequest) -> bytes:
    """What §5.9 compares between a request and its replay: the typed body
    (unknown optional keys dropped), deterministically encoded, hashed."""
    return hashlib.sha256(dumps(request.to_wire())).digest()


# ------------------------------------------------------------------ reading


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _text(body: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    if key not in body:
        if required:
            raise AmpError(MALFORMED, f"missing required field {key!r}", path=_at(path, key))
        return None
    value = body[key]
    if not isinstance(value, str):
        raise AmpError(MALFORMED, f"{key} must be a text string, found {type(value).__name__}", path=_at(path, key))
    if len(value) > _MAX_TEXT:
        raise AmpError(MALFORMED, f"{key} is longer than {_MAX_TEXT} characters", path=_at(path, key))
    return value


def _id16(body: Mapping[str, Any], key: str, path: str) -> bytes:
    value = body.get(key)
    if not isinstance(value, bytes) or len(value) != 16:
        found = "missing" if key not in body else f"{type(value).__name__} of {len(value)} bytes" \
            if isinstance(value, bytes) else type(value).__name__
        raise AmpError(MALFORMED, f"{key} must be a 16-byte byte string ({found})", path=_at(path, key))
    return value


def _required_text(body: Mapping[str, Any], key: str, path: str) -> str:
    value = _text(body, key, path)
    assert value is not None  # required: _text raised otherwise
    return value


def _money(body: Mapping[str, Any], path: str) -> Money:
    if "money" not in body:
        raise AmpError(MALFORMED, "missing required field 'money'", path=_at(path, "money"))
    return parse_money(body["money"], _at(path, "money"))


def _session(body: Mapping[str, Any], path: str) -> SessionContext | None:
    if "session" not in body:
        return None
    value, where = body["session"], _at(path, "session")
    if not isinstance(value, Mapping):
        raise AmpError(MALFORMED, "session must be a map", path=where)
    if value.get("session_scope") is not True:
        raise AmpError(MALFORMED, "session.session_scope must be true", path=_at(where, "session_scope"))
    return SessionContext(_id16(value, "session_id", where))


def parse_request(body: Any, *, path: str = "params") -> PaymentRequest:
    """A CAP_INVOKE ``params`` map read as one §5.11 request body."""
    if not isinstance(body, Mapping):
        raise AmpError(MALFORMED, f"payment params must be a map, found {type(body).__name__}", path=path or None)
    if "pay_v" not in body:
        raise AmpError(MALFORMED, "payment params need pay_v (RFC 007 §5.10)", path=_at(path, "pay_v"))
    pay_v = body["pay_v"]
    if isinstance(pay_v, bool) or not isinstance(pay_v, int):
        raise AmpError(MALFORMED, "pay_v must be an unsigned integer", path=_at(path, "pay_v"))
    if pay_v != PAY_V:
        raise AmpError(UNSUPPORTED_VERSION, f"pay_v {pay_v} is not supported (1)", path=_at(path, "pay_v"))
    op = _text(body, "op", path)
    payment_id = _id16(body, "payment_id", path)
    if op in RESPONSE_OPS:
        raise AmpError(BAD_REQUEST, f"{op!r} is a response op; CAP_INVOKE params carry request ops",
                       path=_at(path, "op"))
    if op not in REQUEST_OPS:
        raise AmpError(UNKNOWN_OPERATION, f"unknown payment op {str(op)[:64]!r}", path=_at(path, "op"))
    base: dict[str, Any] = {"payment_id": payment_id, "session": _session(body, path)}
    if op == "quote_request":
        return QuoteRequest(**base, payee=_required_text(body, "payee", path), money=_money(body, path),
                            service_ref=_text(body, "service_ref", path, required=False))
    if op == "authorize":
        return Authorize(**base, quote_id=_id16(body, "quote_id", path), payer=_required_text(body, "payer", path),
                         payee=_required_text(body, "payee", path), money=_money(body, path))
    if op == "capture":
        return Capture(**base, quote_id=_id16(body, "quote_id", path), money=_money(body, path))
    if op == "cancel":
        return Cancel(**base, reason=_text(body, "reason", path, required=False))
    if op == "refund":
        return Refund(**base, money=_money(body, path) if "money" in body else None,
                      reason=_text(body, "reason", path, required=False))
    return StatusQuery(**base)


def response_base(request: PaymentRequest) -> dict[str, Any]:
    """``payment-base`` of the answer to ``request``: same payment, same
    session context (A.6: session correlation preserved)."""
    out: dict[str, Any] = {"pay_v": PAY_V, "op": RESPONSE_OF[request.op], "payment_id": request.payment_id}
    if request.session is not None:
        out["session"] = request.session.to_wire()
    return out
