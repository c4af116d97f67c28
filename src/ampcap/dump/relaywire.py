"""The RFC 003 relay's HTTP bodies in a capture, read with verdicts (sans-I/O).

:func:`read_relay_body` takes one captured request or response body that
is not a plain AMP message and says what it is:

* a webhook delivery (RFC 002 §6.3; ``X-AMP-Relay`` header): the wrapper's
  message is handed on, and the signature over timestamp + body is checked
  when the relay is a did:key (no keyring needed);
* a relay-forward wrapper (§6.5, ``fwd_v``): the message inside is handed
  on; the wrapper is read as strictly as a relay reads it;
* a relay-forward-response: an acceptance's transfer receipt is decoded
  (COSE_Sign1, its tuple shown; verified against the downstream DID it
  names when that is a did:key), a refusal's code said;
* a relay-commit-report (§6.6, ``commit_v``) and its commit receipt, and
  the commit answer.

The result is the AMP messages found and the verdict lines: ``(code,
text)``, code None for a verdict that finds nothing wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import AmpError
from ..relay.federation import decode_commit_report, decode_forward, decode_forward_answer, read_commit_receipt
from ..relay.webhook import RELAY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, read_webhook
from ..wire import cbor
from ..wire.identity import DidKeyResolver

__all__ = ["RelayBody", "read_relay_body"]

_WEBHOOK_KEYS = frozenset({"message", "relay", "sent_at"})
_ANSWER_KEYS = frozenset({"accepted", "receipt", "error_code", "error_message"})


@dataclass(slots=True)
class RelayBody:
    kind: str
    messages: list[bytes] = field(default_factory=list)
    verdicts: list[tuple[int | None, str]] = field(default_factory=list)


def _short(did: Any) -> str:
    return str(did)[:60]


def _receipt_line(receipt: bytes, what: str) -> tuple[int | None, str]:
    try:
        payload = read_commit_receipt(receipt)  # any COSE_Sign1 receipt: its payload, unverified
    except AmpError as exc:
        return 3001, f"{what} is not a valid COSE_Sign1 receipt: {exc.message}"
    fields = ", ".join(f"{k}={_short(v.hex() if isinstance(v, bytes) else v)}" for k, v in sorted(
        payload.items(), key=lambda kv: str(kv[0])) if k in ("status", "result", "msg_id", "recipient_did",
                                                             "downstream_relay", "hop_limit_remaining"))
    return None, f"{what}: {fields}"


def read_relay_body(body: bytes, headers: Mapping[str, str], *, max_size: int, now_ms: int | None = None
                    ) -> RelayBody | None:
    """What this body is, or None when it is none of the relay's (module docstring).
    ``headers`` are lower-cased names."""
    try:
        value = cbor.loads(body, cbor.DecodeLimits(max_bytes=max_size))
    except AmpError:
        return None
    if type(value) is not dict:
        return None
    keys = set(value)
    if RELAY_HEADER.lower() in headers and keys == _WEBHOOK_KEYS:
        return _webhook(value, body, headers, now_ms)
    if "fwd_v" in keys:
        result = RelayBody("relay-forward")
        try:
            req = decode_forward(body)
        except AmpError as exc:
            result.verdicts.append((exc.code, f"relay-forward wrapper refused: {exc.message}"))
            if type(value.get("message")) is bytes:
                result.messages.append(value["message"])
            return result
        result.messages.append(req.message)
        result.verdicts.append((None, f"relay-forward {req.transfer_mode} custody, hop_limit {req.hop_limit}, "
                                      f"relay_path {len(req.relay_path)} hop(s), from upstream "
                                      f"{_short(req.upstream_relay)}"))
        return result
    if "commit_v" in keys:
        result = RelayBody("relay-commit-report")
        try:
            receipt = decode_commit_report(body)
        except AmpError as exc:
            result.verdicts.append((exc.code, f"relay-commit-report refused: {exc.message}"))
            return result
        result.verdicts.append(_receipt_line(receipt, "commit receipt"))
        return result
    if "accepted" in keys and keys <= _ANSWER_KEYS:
        result = RelayBody("relay-answer")
        try:
            answer = decode_forward_answer(body)
        except AmpError as exc:
            result.verdicts.append((exc.code, exc.message))
            return result
        if answer.accepted and answer.receipt is not None:
            result.verdicts.append(_receipt_line(answer.receipt, "accepted; transfer receipt"))
        elif answer.accepted:
            result.verdicts.append((None, "accepted"))
        else:
            result.verdicts.append((answer.error_code or 1001, "refused" + (
                f": {answer.error_message[:200]}" if answer.error_message else "")))
        return result
    return None


def _webhook(value: dict[Any, Any], body: bytes, headers: Mapping[str, str], now_ms: int | None) -> RelayBody:
    result = RelayBody("webhook")
    message, relay = value.get("message"), value.get("relay")
    if type(message) is bytes:
        result.messages.append(message)
    named = {RELAY_HEADER: headers.get(RELAY_HEADER.lower(), ""),
             TIMESTAMP_HEADER: headers.get(TIMESTAMP_HEADER.lower(), ""),
             SIGNATURE_HEADER: headers.get(SIGNATURE_HEADER.lower(), "")}
    if not (type(relay) is str and relay.startswith("did:key:")):
        result.verdicts.append((None, f"webhook from {_short(relay)}: its key needs a keyring; not verified"))
        return result
    # A capture is read later: its own sent_at is "now" for the freshness check.
    sent_at = value.get("sent_at")
    at: int = now_ms if now_ms is not None else sent_at if type(sent_at) is int else 0
    try:
        read_webhook(named, body, resolver=DidKeyResolver(), trusted={relay}, now_ms=at)
    except AmpError as exc:
        result.verdicts.append((exc.code, f"webhook delivery refused: {exc.message}"))
        return result
    result.verdicts.append((None, f"webhook from {_short(relay)}: X-AMP-Signature verifies"))
    return result
