"""The RFC 002 §6.3 webhook delivery (Relay Push profile), both sides, sans-I/O.

The body is the fixed wrapper ``{"message": bstr, "relay": tstr, "sent_at":
uint}`` (deterministic CBOR, the message's raw bytes unchanged). RFC 002
says ``X-AMP-Signature`` is computed "over timestamp + body" without fixing
the encoding, so ampcap fixes it (docs/relay.md): the signature is Ed25519
by the relay's key over the ASCII decimal ``X-AMP-Timestamp`` (Unix
seconds) followed directly by the body bytes, sent as base64url without
padding. The receiver checks, in order: the wrapper's shape (1001), that
``X-AMP-Relay`` names the wrapper's ``relay`` and a relay it trusts (3001),
the timestamp's freshness (1003), the signature (3001). The message inside
then goes through the receiver's normal receive checks.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import AmpError
from ..wire.cbor import DecodeLimits, dumps, loads
from ..wire.identity import Identity, KeyResolver
from ..wire.signing import verify_signature

__all__ = ["WEBHOOK_PATH", "RELAY_HEADER", "TIMESTAMP_HEADER", "SIGNATURE_HEADER", "WebhookDelivery",
           "build_webhook", "read_webhook", "MAX_WEBHOOK_SKEW_S"]

WEBHOOK_PATH = "/amp/v1/webhook"
RELAY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER = "X-AMP-Relay", "X-AMP-Timestamp", "X-AMP-Signature"
MAX_WEBHOOK_SKEW_S = 300
_LIMITS = DecodeLimits(max_depth=2, max_items=8, max_bytes=64 << 20)


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookDelivery:
    message: bytes
    relay: str
    sent_at: int


def _signed(timestamp: str, body: bytes) -> bytes:
    return timestamp.encode("ascii") + body


def build_webhook(identity: Identity, raw: bytes, now_ms: int) -> tuple[dict[str, str], bytes]:
    """(headers, body) of one webhook POST carrying ``raw``, signed by the relay."""
    body = dumps({"message": raw, "relay": identity.did, "sent_at": now_ms})
    timestamp = str(now_ms // 1000)
    signature = base64.urlsafe_b64encode(identity.sign(_signed(timestamp, body))).rstrip(b"=").decode("ascii")
    return {RELAY_HEADER: identity.did, TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature}, body


def read_webhook(headers: Mapping[str, str], body: bytes, *, resolver: KeyResolver, trusted: Collection[str],
                 now_ms: int, max_skew_s: int = MAX_WEBHOOK_SKEW_S) -> WebhookDelivery:
    """The receiver's checks (RFC 002 §6.3); ``headers`` keyed case-insensitively by the caller."""
    try:
        value: Any = loads(body, _LIMITS)
    except AmpError as exc:
        raise AmpError(1001, f"webhook body is not CBOR: {exc.message}") from None
    if type(value) is not dict or set(value) != {"message", "relay", "sent_at"}:
        raise AmpError(1001, "webhook body is not the RFC 002 §6.3 wrapper (message, relay, sent_at)")
    message, relay, sent_at = value["message"], value["relay"], value["sent_at"]
    if type(message) is not bytes or type(relay) is not str or type(sent_at) is not int or sent_at < 0:
        raise AmpError(1001, "webhook body: message must be bytes, relay text, sent_at an unsigned integer")
    if headers.get(RELAY_HEADER) != relay:
        raise AmpError(3001, f"{RELAY_HEADER} does not name the wrapper's relay")
    if relay not in trusted:
        raise AmpError(3001, f"webhook from {relay[:80]}, which is not a relay this agent uses")
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise AmpError(1001, f"{TIMESTAMP_HEADER} must be Unix seconds")
    if abs(now_ms // 1000 - int(timestamp)) > max_skew_s:
        raise AmpError(1003, f"{TIMESTAMP_HEADER} is not fresh (more than {max_skew_s} s away)")
    text = headers.get(SIGNATURE_HEADER, "")
    try:
        signature = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise AmpError(3001, f"{SIGNATURE_HEADER} is not base64url") from None
    try:
        key = resolver.ed25519_for(relay)
    except AmpError:
        raise AmpError(3001, "the relay's key cannot be resolved") from None
    if len(signature) != 64 or not verify_signature(key, _signed(timestamp, body), signature):
        raise AmpError(3001, f"{SIGNATURE_HEADER} does not verify")
    return WebhookDelivery(message=message, relay=relay, sent_at=sent_at)
