"""Relay-to-relay handoff (RFC 003 §5.6, RFC 002 §6.5-§6.6): the wrappers,
the receipts, loop prevention and downstream selection. Pure functions.

Receipts are COSE_Sign1 (alg -8, ``kid`` the signer's DID URL), signed and
read with :mod:`ampcap.deleg.cose`, whose failure codes are the delegation
ones (3004); here every failure to authenticate a receipt is 3001 (§7), an
unsupported ``receipt_v``/``commit_v`` is 1004 (§8), and a malformed wrapper
is 1001.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..deleg.cose import PAYLOAD_LIMITS, decode_sign1, sign1, verify_sign1
from ..errors import AmpError
from ..wire.cbor import DecodeLimits, dumps, loads
from ..wire.identity import Identity, KeyResolver

__all__ = ["ForwardRequest", "ForwardAnswer", "TransferReceipt", "CommitReceipt", "encode_forward", "decode_forward",
           "encode_forward_answer", "decode_forward_answer", "encode_commit_report", "decode_commit_report",
           "encode_commit_answer", "sign_transfer_receipt", "verify_transfer_receipt", "sign_commit_receipt",
           "verify_commit_receipt", "next_hop", "LoopRefused", "MODES", "RelayCandidate", "select_downstream"]

MALFORMED, UNSUPPORTED, RELAY_REJECTED, UNAUTHORIZED = 1001, 1004, 2003, 3001
MODES = ("single", "dual")
_WRAPPER_LIMITS = DecodeLimits(max_depth=4, max_items=4096, max_bytes=64 << 20)
_FORWARD_KEYS = {"fwd_v", "message", "from_did", "recipient_did", "relay_path", "hop_limit", "upstream_relay",
                 "transfer_mode"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardRequest:
    """RFC 002 §6.5 ``relay-forward``."""

    message: bytes
    from_did: str
    recipient_did: str
    relay_path: tuple[str, ...]
    hop_limit: int
    upstream_relay: str
    transfer_mode: str


def encode_forward(req: ForwardRequest) -> bytes:
    return dumps({"fwd_v": 1, "message": req.message, "from_did": req.from_did, "recipient_did": req.recipient_did,
                  "relay_path": list(req.relay_path), "hop_limit": req.hop_limit,
                  "upstream_relay": req.upstream_relay, "transfer_mode": req.transfer_mode})


def _map(data: bytes, what: str, limits: DecodeLimits = _WRAPPER_LIMITS) -> dict[Any, Any]:
    try:
        value = loads(data, limits)
    except AmpError as exc:
        raise AmpError(MALFORMED, f"{what} is not CBOR: {exc.message}") from None
    if type(value) is not dict:
        raise AmpError(MALFORMED, f"{what} is not a CBOR map")
    return value


def _text(m: dict[Any, Any], key: str, what: str) -> str:
    value = m.get(key)
    if type(value) is not str or not value:
        raise AmpError(MALFORMED, f"{what}: {key} must be a non-empty text string", path=key)
    return value


def _uint(m: dict[Any, Any], key: str, what: str) -> int:
    value = m.get(key)
    if type(value) is not int or value < 0:
        raise AmpError(MALFORMED, f"{what}: {key} must be an unsigned integer", path=key)
    return value


def decode_forward(data: bytes) -> ForwardRequest:
    """Read a relay-forward wrapper strictly: 1004 for ``fwd_v`` != 1, 1001
    for any other fault (missing, mistyped or unknown fields)."""
    m = _map(data, "relay-forward")
    if "fwd_v" not in m:
        raise AmpError(MALFORMED, "relay-forward: fwd_v is missing", path="fwd_v")
    if m["fwd_v"] != 1 or type(m["fwd_v"]) is not int:
        raise AmpError(UNSUPPORTED, f"relay-forward: fwd_v {m['fwd_v']!r:.20} is not supported (only 1)",
                       path="fwd_v")
    unknown = set(m) - _FORWARD_KEYS
    if unknown:
        raise AmpError(MALFORMED, f"relay-forward: unknown field {sorted(map(str, unknown))[0]!r}")
    message = m.get("message")
    if type(message) is not bytes:
        raise AmpError(MALFORMED, "relay-forward: message must be a byte string", path="message")
    path = m.get("relay_path")
    if type(path) is not list or not all(type(p) is str and p for p in path):
        raise AmpError(MALFORMED, "relay-forward: relay_path must be an array of text strings", path="relay_path")
    mode = m.get("transfer_mode")
    if mode not in MODES:
        raise AmpError(MALFORMED, "relay-forward: transfer_mode must be 'single' or 'dual'", path="transfer_mode")
    return ForwardRequest(message=message, from_did=_text(m, "from_did", "relay-forward"),
                          recipient_did=_text(m, "recipient_did", "relay-forward"), relay_path=tuple(path),
                          hop_limit=_uint(m, "hop_limit", "relay-forward"),
                          upstream_relay=_text(m, "upstream_relay", "relay-forward"), transfer_mode=str(mode))


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardAnswer:
    """RFC 002 §6.5 ``relay-forward-response``."""

    accepted: bool
    receipt: bytes | None = None
    error_code: int | None = None
    error_message: str | None = None


def encode_forward_answer(answer: ForwardAnswer) -> bytes:
    m: dict[str, Any] = {"accepted": answer.accepted}
    if answer.accepted:
        m["receipt"] = answer.receipt
    else:
        if answer.error_code is not None:
            m["error_code"] = answer.error_code
        if answer.error_message is not None:
            m["error_message"] = answer.error_message
    return dumps(m)


def decode_forward_answer(data: bytes) -> ForwardAnswer:
    m = _map(data, "relay-forward-response")
    accepted = m.get("accepted")
    if type(accepted) is not bool:
        raise AmpError(MALFORMED, "relay-forward-response: accepted must be a boolean", path="accepted")
    receipt = m.get("receipt")
    if accepted and type(receipt) is not bytes:
        raise AmpError(MALFORMED, "relay-forward-response: an acceptance must carry its receipt", path="receipt")
    if not accepted and "receipt" in m:
        raise AmpError(MALFORMED, "relay-forward-response: a refusal must not carry a receipt", path="receipt")
    code = m.get("error_code")
    text = m.get("error_message")
    return ForwardAnswer(accepted=accepted, receipt=receipt if accepted else None,
                         error_code=code if type(code) is int else None,
                         error_message=text if type(text) is str else None)


def encode_commit_report(commit_receipt: bytes) -> bytes:
    return dumps({"commit_v": 1, "commit_receipt": commit_receipt})


def decode_commit_report(data: bytes) -> bytes:
    """The commit receipt of a ``relay-commit-report`` (1004 for ``commit_v`` != 1)."""
    m = _map(data, "relay-commit-report")
    if m.get("commit_v") != 1 or type(m.get("commit_v")) is not int:
        code = MALFORMED if "commit_v" not in m else UNSUPPORTED
        raise AmpError(code, "relay-commit-report: commit_v must be 1", path="commit_v")
    receipt = m.get("commit_receipt")
    if type(receipt) is not bytes or set(m) != {"commit_v", "commit_receipt"}:
        raise AmpError(MALFORMED, "relay-commit-report: commit_receipt must be a byte string (and nothing else)",
                       path="commit_receipt")
    return receipt


def encode_commit_answer(accepted: bool, code: int | None = None, message: str | None = None) -> bytes:
    m: dict[str, Any] = {"accepted": accepted}
    if not accepted:
        if code is not None:
            m["error_code"] = code
        if message is not None:
            m["error_message"] = message
    return dumps(m)


# ------------------------------------------------------------------ receipts


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferReceipt:
    """RFC 003 §4.1 payload."""

    msg_id: bytes
    from_did: str
    recipient_did: str
    upstream_relay: str
    downstream_relay: str
    accepted_at: int
    hop_limit_remaining: int
    status: str = "accepted"
    reason_code: int | None = None

    def to_map(self) -> dict[str, Any]:
        m: dict[str, Any] = {"receipt_v": 1, "msg_id": self.msg_id, "from_did": self.from_did,
                             "recipient_did": self.recipient_did, "upstream_relay": self.upstream_relay,
                             "downstream_relay": self.downstream_relay, "accepted_at": self.accepted_at,
                             "hop_limit_remaining": self.hop_limit_remaining, "status": self.status}
        if self.reason_code is not None:
            m["reason_code"] = self.reason_code
        return m


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitReceipt:
    """RFC 003 §4.3 payload."""

    msg_id: bytes
    from_did: str
    recipient_did: str
    upstream_relay: str
    downstream_relay: str
    result: str
    committed_at: int
    reason_code: int | None = None

    def to_map(self) -> dict[str, Any]:
        m: dict[str, Any] = {"commit_v": 1, "msg_id": self.msg_id, "from_did": self.from_did,
                             "recipient_did": self.recipient_did, "upstream_relay": self.upstream_relay,
                             "downstream_relay": self.downstream_relay, "result": self.result,
                             "committed_at": self.committed_at}
        if self.reason_code is not None:
            m["reason_code"] = self.reason_code
        return m


def sign_transfer_receipt(identity: Identity, receipt: TransferReceipt) -> bytes:
    return sign1(identity, dumps(receipt.to_map()))


def sign_commit_receipt(identity: Identity, receipt: CommitReceipt) -> bytes:
    return sign1(identity, dumps(receipt.to_map()))


def _verified_payload(data: Any, resolver: KeyResolver, signer: str, what: str) -> dict[Any, Any]:
    """Decode and authenticate a receipt: signed by ``signer`` (the
    downstream relay). Every authentication failure is 3001, an unsupported
    ``alg`` included (§4.2, §4.4)."""
    try:
        signed = decode_sign1(data, what)
        verify_sign1(signed, resolver, signer=signer, what=what)
    except AmpError as exc:
        raise AmpError(UNAUTHORIZED, exc.message) from None
    payload = _map(signed.payload, what, PAYLOAD_LIMITS)
    return payload


def _check_tuple(m: dict[Any, Any], expected: dict[str, Any], what: str) -> None:
    for key, want in expected.items():
        if m.get(key) != want or type(m.get(key)) is not type(want):
            raise AmpError(UNAUTHORIZED, f"{what}: {key} does not match the handoff", path=key)


def verify_transfer_receipt(data: Any, resolver: KeyResolver, *, msg_id: bytes, from_did: str, recipient_did: str,
                            upstream_relay: str, downstream_relay: str) -> TransferReceipt:
    """§4.1 validation. Returns the receipt (whose ``status`` may be
    ``rejected``: a valid refusal, not custody)."""
    what = "transfer receipt"
    m = _verified_payload(data, resolver, downstream_relay, what)
    if m.get("receipt_v") != 1:
        raise AmpError(UNSUPPORTED, f"{what}: receipt_v {m.get('receipt_v')!r:.20} is not supported", path="receipt_v")
    _check_tuple(m, {"msg_id": msg_id, "from_did": from_did, "recipient_did": recipient_did,
                     "upstream_relay": upstream_relay, "downstream_relay": downstream_relay}, what)
    status = m.get("status")
    if status not in ("accepted", "rejected"):
        raise AmpError(UNAUTHORIZED, f"{what}: status must be 'accepted' or 'rejected'", path="status")
    reason = m.get("reason_code")
    try:
        return TransferReceipt(msg_id=msg_id, from_did=from_did, recipient_did=recipient_did,
                               upstream_relay=upstream_relay, downstream_relay=downstream_relay,
                               accepted_at=_uint(m, "accepted_at", what),
                               hop_limit_remaining=_uint(m, "hop_limit_remaining", what), status=str(status),
                               reason_code=reason if type(reason) is int else None)
    except AmpError as exc:
        raise AmpError(UNAUTHORIZED, exc.message, path=exc.path) from None


def read_commit_receipt(data: Any) -> dict[Any, Any]:
    """The unverified payload of a commit receipt (to find its transfer
    context before verifying it against that context)."""
    try:
        signed = decode_sign1(data, "commit receipt")
    except AmpError as exc:
        raise AmpError(UNAUTHORIZED, exc.message) from None
    return _map(signed.payload, "commit receipt", PAYLOAD_LIMITS)


def verify_commit_receipt(data: Any, resolver: KeyResolver, *, msg_id: bytes, from_did: str, recipient_did: str,
                          upstream_relay: str, downstream_relay: str) -> CommitReceipt:
    """§4.3 validation against the accepted transfer context."""
    what = "commit receipt"
    m = _verified_payload(data, resolver, downstream_relay, what)
    if m.get("commit_v") != 1:
        raise AmpError(UNSUPPORTED, f"{what}: commit_v {m.get('commit_v')!r:.20} is not supported", path="commit_v")
    _check_tuple(m, {"msg_id": msg_id, "from_did": from_did, "recipient_did": recipient_did,
                     "upstream_relay": upstream_relay, "downstream_relay": downstream_relay}, what)
    result = m.get("result")
    if result not in ("delivered", "failed", "expired"):
        raise AmpError(UNAUTHORIZED, f"{what}: result must be delivered, failed or expired", path="result")
    reason = m.get("reason_code")
    try:
        committed_at = _uint(m, "committed_at", what)
    except AmpError as exc:
        raise AmpError(UNAUTHORIZED, exc.message, path=exc.path) from None
    return CommitReceipt(msg_id=msg_id, from_did=from_did, recipient_did=recipient_did, upstream_relay=upstream_relay,
                         downstream_relay=downstream_relay, result=str(result), committed_at=committed_at,
                         reason_code=reason if type(reason) is int else None)


# ------------------------------------------------------------------ loops and routes


class LoopRefused(AmpError):
    """§5.6.2 refusal: 2003 with a machine-readable ``reason`` in details."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(RELAY_REJECTED, message, details={"reason": reason})
        self.reason = reason


def next_hop(local_relay: str, relay_path: Sequence[str], hop_limit: int) -> tuple[tuple[str, ...], int]:
    """§5.6.5 steps 1-4, in that order: refuse a path that already names us
    (``loop``), then a spent hop limit (``hop_limit``); else the outgoing
    ``relay_path`` and ``hop_limit``."""
    if local_relay in relay_path:
        raise LoopRefused("loop", f"relay loop: {local_relay} is already in relay_path")
    if hop_limit <= 0:
        raise LoopRefused("hop_limit", "hop limit exhausted (hop_limit = 0)")
    return (*relay_path, local_relay), hop_limit - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayCandidate:
    """A downstream relay that may take a recipient's messages (from the
    routes file until RFC 008 discovery exists)."""

    did: str
    url: str
    order: int
    """Service order: the position in the routes file unless given."""
    transfer_modes: tuple[str, ...] = ("single",)
    """§5.6.1 fallback when absent: single only."""
    receipt_algs: tuple[int, ...] = (-8,)
    """Fallback when absent: -8 only."""
    max_hop_limit: int | None = None


def select_downstream(candidates: Sequence[RelayCandidate], *, mode: str, hop_limit: int,
                      supported_algs: Sequence[int] = (-8,)) -> list[RelayCandidate]:
    """§5.6.1: the eligible candidates, best first. Eligible: supports
    ``mode``, shares a receipt algorithm with us, and (when it says one)
    takes a hop limit this large. Order: service order, then the endpoint
    URI's lexical order as the stable tie-break."""
    eligible = [c for c in candidates
                if mode in c.transfer_modes and set(c.receipt_algs) & set(supported_algs)
                and (c.max_hop_limit is None or hop_limit <= c.max_hop_limit)]
    return sorted(eligible, key=lambda c: (c.order, c.url))
