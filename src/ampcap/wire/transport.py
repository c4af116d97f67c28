"""RFC 002 §4.4–§4.5 control-frame payloads: HANDSHAKE, GOAWAY, transport ERROR.

Each payload is a small frozen class with ``to_payload()`` (deterministic
CBOR) and a strict ``from_payload()``: the CDDL maps are closed, so unknown
keys, missing keys and wrong types are all ``AmpError(1001)`` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AmpError
from .cbor import DecodeLimits, dumps, loads
from .frames import MIN_MAX_SIZE, FrameType

__all__ = [
    "HandshakeRequest",
    "HandshakeResponse",
    "GoAway",
    "TransportError",
    "effective_max",
    "decode_control_payload",
    "decode_handshake",
    "TRANSPORT_VERSION",
]

_INVALID = 1001
TRANSPORT_VERSION = 1
# Control payloads are tiny; refuse anything bigger or deeper than plausible.
_CONTROL_LIMITS = DecodeLimits(max_depth=4, max_items=1024, max_bytes=64 * 1024)

def effective_max(ours: int, theirs: int) -> int:
    """The negotiated payload maximum: the smaller offer, never under 1 MiB (R4)."""
    return max(min(ours, theirs), MIN_MAX_SIZE)


# ------------------------------------------------------------------ checks


def _is_uint(v: Any) -> bool:
    return type(v) is int and 0 <= v < (1 << 64)


def _map(payload: bytes, what: str, required: frozenset[str], optional: frozenset[str]) -> dict[str, Any]:
    value = loads(payload, _CONTROL_LIMITS)
    if type(value) is not dict:
        raise AmpError(_INVALID, f"{what} payload must be a CBOR map", path=what)
    for key in value:
        if type(key) is not str or key not in required | optional:
            raise AmpError(_INVALID, f"unexpected key {key!r} in {what}", path=f"{what}.{key}")
    for key in sorted(required):
        if key not in value:
            raise AmpError(_INVALID, f"{what} lacks required key {key!r}", path=f"{what}.{key}")
    return value


def _field(m: dict[str, Any], what: str, key: str, ok: Callable[[Any], bool], expected: str) -> Any:
    value = m.get(key)
    if key in m and not ok(value):
        raise AmpError(_INVALID, f"{what}.{key} must be {expected}, found {type(value).__name__}",
                       path=f"{what}.{key}")
    return value


def _is_text_list(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _is_id(v: Any) -> bool:
    return type(v) is bytes and len(v) == 16


def _put(m: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        m[key] = list(value) if isinstance(value, tuple) else value


# --------------------------------------------------------------- payloads


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeRequest:
    """Client → server, the first frame of every RFC 002 connection."""

    version: int = TRANSPORT_VERSION
    max_msg_size: int
    did: str | None = None
    token: bytes | None = None
    extensions: tuple[str, ...] | None = None

    def to_payload(self) -> bytes:
        m: dict[str, Any] = {"version": self.version, "max_msg_size": self.max_msg_size}
        _put(m, "did", self.did)
        _put(m, "token", self.token)
        _put(m, "extensions", self.extensions)
        return dumps(m)

    @classmethod
    def from_payload(cls, payload: bytes) -> HandshakeRequest:
        w = "handshake"
        m = _map(payload, w, frozenset({"version", "max_msg_size"}), frozenset({"did", "token", "extensions"}))
        ext = _field(m, w, "extensions", _is_text_list, "an array of text")
        return cls(
            version=_field(m, w, "version", _is_uint, "an unsigned integer"),
            max_msg_size=_field(m, w, "max_msg_size", _is_uint, "an unsigned integer"),
            did=_field(m, w, "did", lambda v: type(v) is str, "text"),
            token=_field(m, w, "token", lambda v: type(v) is bytes, "a byte string"),
            extensions=tuple(ext) if ext is not None else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HandshakeResponse:
    """Server → client answer to the HANDSHAKE; ``accepted=False`` carries ``error``."""

    version: int = TRANSPORT_VERSION
    accepted: bool
    max_msg_size: int
    error: str | None = None
    extensions: tuple[str, ...] | None = None

    def to_payload(self) -> bytes:
        m: dict[str, Any] = {"version": self.version, "accepted": self.accepted,
                             "max_msg_size": self.max_msg_size}
        _put(m, "error", self.error)
        _put(m, "extensions", self.extensions)
        return dumps(m)

    @classmethod
    def from_payload(cls, payload: bytes) -> HandshakeResponse:
        w = "handshake"
        m = _map(payload, w, frozenset({"version", "accepted", "max_msg_size"}),
                 frozenset({"error", "extensions"}))
        ext = _field(m, w, "extensions", _is_text_list, "an array of text")
        return cls(
            version=_field(m, w, "version", _is_uint, "an unsigned integer"),
            accepted=_field(m, w, "accepted", lambda v: type(v) is bool, "a boolean"),
            max_msg_size=_field(m, w, "max_msg_size", _is_uint, "an unsigned integer"),
            error=_field(m, w, "error", lambda v: type(v) is str, "text"),
            extensions=tuple(ext) if ext is not None else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GoAway:
    """RFC 002 §4.5: the sender stops taking new work; ``last_id`` is the last
    message id it will still process."""

    reason: int
    message: str | None = None
    last_id: bytes | None = None

    def to_payload(self) -> bytes:
        m: dict[str, Any] = {"reason": self.reason}
        _put(m, "message", self.message)
        _put(m, "last_id", self.last_id)
        return dumps(m)

    @classmethod
    def from_payload(cls, payload: bytes) -> GoAway:
        w = "goaway"
        m = _map(payload, w, frozenset({"reason"}), frozenset({"message", "last_id"}))
        return cls(
            reason=_field(m, w, "reason", _is_uint, "an unsigned integer"),
            message=_field(m, w, "message", lambda v: type(v) is str, "text"),
            last_id=_field(m, w, "last_id", _is_id, "a 16-byte string"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportError:
    """RFC 002 §4.5 transport ERROR frame payload (``msg_id`` names the message
    that caused it, when there was one)."""

    code: int
    message: str
    msg_id: bytes | None = None

    def to_payload(self) -> bytes:
        m: dict[str, Any] = {"code": self.code, "message": self.message}
        _put(m, "msg_id", self.msg_id)
        return dumps(m)

    @classmethod
    def from_payload(cls, payload: bytes) -> TransportError:
        w = "error"
        m = _map(payload, w, frozenset({"code", "message"}), frozenset({"msg_id"}))
        return cls(
            code=_field(m, w, "code", _is_uint, "an unsigned integer"),
            message=_field(m, w, "message", lambda v: type(v) is str, "text"),
            msg_id=_field(m, w, "msg_id", _is_id, "a 16-byte string"),
        )


def decode_handshake(payload: bytes) -> HandshakeRequest | HandshakeResponse:
    """A HANDSHAKE frame's payload, either direction (``accepted`` tells which)."""
    value = loads(payload, _CONTROL_LIMITS)
    if type(value) is dict and "accepted" in value:
        return HandshakeResponse.from_payload(payload)
    return HandshakeRequest.from_payload(payload)


def decode_control_payload(frame_type: int, payload: bytes) -> Any:
    """Decode a control frame's payload by frame type (used by the dump).

    PING/PONG payloads are opaque and returned as bytes; AMP_MESSAGE is not a
    control frame and is refused.
    """
    if frame_type == FrameType.HANDSHAKE:
        return decode_handshake(payload)
    if frame_type == FrameType.GOAWAY:
        return GoAway.from_payload(payload)
    if frame_type == FrameType.ERROR:
        return TransportError.from_payload(payload)
    if frame_type in (FrameType.PING, FrameType.PONG):
        return bytes(payload)
    raise ValueError(f"frame type 0x{frame_type:02X} is not a control frame")
