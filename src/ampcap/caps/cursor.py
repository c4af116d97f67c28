"""Opaque, tamper-evident, expiring query cursors (RFC 004 §6.5, ruling R7).

A cursor says where the previous page ended (the last ``(name, version)``
returned) and which registry snapshot the listing reads (a generation
number), bound to a digest of the filter and order it was minted for. It is
MACed (HMAC-SHA-256, truncated) with a key the registry was given, and
carries its expiry. The client cannot read or alter it; a registry with
another key (a restarted daemon) refuses it.

Sans-I/O: the key is injected and time arrives as ``now_ms``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import msgspec

from ..errors import AmpError
from ..wire.cbor import dumps, loads

__all__ = ["Cursor", "CursorCodec", "CURSOR_TTL_MS"]

BAD_REQUEST = 4001
CURSOR_TTL_MS = 10 * 60_000
_MAC_BYTES = 16
_MAX_CURSOR_BYTES = 512


class Cursor(msgspec.Struct, frozen=True):
    """Where a listing resumes: strictly after ``(name, version)`` in the
    listing's order, reading snapshot ``generation``."""

    name: str
    version: str
    generation: int


class CursorCodec:
    def __init__(self, key: bytes, *, ttl_ms: int = CURSOR_TTL_MS) -> None:
        if len(key) < 16:
            raise ValueError("cursor key must be at least 16 bytes")
        self._key = key
        self.ttl_ms = ttl_ms

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    def mint(self, cursor: Cursor, context: bytes, now_ms: int) -> str:
        payload = dumps([cursor.name, cursor.version, cursor.generation, now_ms + self.ttl_ms, context])
        return base64.urlsafe_b64encode(payload + self._mac(payload)).rstrip(b"=").decode("ascii")

    def open(self, text: str, context: bytes, now_ms: int) -> Cursor:
        """The cursor, or 4001 when it is malformed, altered, foreign,
        expired, or was minted for another filter or order."""
        bad = AmpError(BAD_REQUEST, "invalid or expired cursor", path="body.cursor")
        if not isinstance(text, str) or len(text) > _MAX_CURSOR_BYTES:
            raise bad
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (ValueError, TypeError):
            raise bad from None
        if len(raw) <= _MAC_BYTES:
            raise bad
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise bad
        try:
            name, version, generation, expires, bound = loads(payload)
        except (AmpError, ValueError, TypeError):
            raise bad from None
        if bound != context:
            raise AmpError(BAD_REQUEST, "cursor does not match this filter and order", path="body.cursor")
        if not (isinstance(name, str) and isinstance(version, str) and type(generation) is int
                and type(expires) is int) or now_ms > expires:
            raise bad
        return Cursor(name, version, generation)
