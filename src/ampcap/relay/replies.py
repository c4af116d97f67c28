"""The relay's own messages, signed by its identity: an ERROR answering a
refused message, and a relay ACK (``ack_source = "relay"``) for an accepted
one (RFC 001 §16.1). Built with the envelope code every ampcap peer uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..wire.envelope import seal
from ..wire.registry import MessageType, error_body

__all__ = ["relay_error", "relay_ack"]

Entropy = Callable[[int], bytes]


def relay_error(identity: Any, *, to: str, reply_to: bytes | None, code: int, message: str, now: int,
                entropy: Entropy, ttl: int, details: Any = None) -> bytes:
    _, raw = seal(identity, typ=int(MessageType.ERROR), to=to, body=error_body(code, message, details),
                  now_ms=now, entropy=entropy, ttl=ttl, reply_to=reply_to)
    return raw


def relay_ack(identity: Any, *, to: str, reply_to: bytes, now: int, entropy: Entropy, ttl: int) -> bytes:
    _, raw = seal(identity, typ=int(MessageType.ACK), to=to, body={"ack_source": "relay", "received_at": now},
                  now_ms=now, entropy=entropy, ttl=ttl, reply_to=reply_to)
    return raw
