"""RFC 002 §4.4–§4.5 control-frame payloads: HANDSHAKE, GOAWAY, transport ERROR.

Each payload is a small frozen class with ``to_payload()`` (deterministic
CBOR) and a strict ``from_payload()``: the CDDL maps are closed, so unknown
keys, missing keys and wrong types are all ``AmpError(1001)`` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Self

import msgspec

from ..errors import AmpError
from .cbor import UINT64_MAX, DecodeLimits, dumps, loads
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
    "MAX_CONTROL_PAYLOAD",
]

_INVALID = 1001
TRANSPORT_VERSION = 1
# Control payloads are tiny; refuse anything bigger or deeper than plausible.
# (A Connection refuses a HANDSHAKE, GOAWAY or ERROR frame over this size from
# its header, before the payload is buffered.)
MAX_CONTROL_PAYLOAD = 64 * 1024
_CONTROL_LIMITS = DecodeLimits(max_depth=4, max_items=1024, max_bytes=MAX_CONTROL_PAYLOAD)

def effective_max(ours: int, theirs: int) -> int:
    """The negotiated payload maximum: the smaller offer, never under 1 MiB (R4)."""
    return max(min(ours, theirs), MIN_MAX_SIZE)


# ------------------------------------------------------------------ checks


def _is_uint(v: Any) -> bool:
    return type(v) is int and 0 <= v <= UINT64_MAX


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


# A field's type check and how an error names what was expected.
_Check = tuple[Callable[[Any], bool], str]
_UINT: _Check = (_is_uint, "an unsigned integer")
_TEXT: _Check = (lambda v: type(v) is str, "text")
_BYTES: _Check = (lambda v: type(v) is bytes, "a byte string")
_BOOL: _Check = (lambda v: type(v) is bool, "a boolean")
_ID: _Check = (_is_id, "a 16-byte string")
_TEXT_LIST: _Check = (_is_text_list, "an array of text")


class _ControlPayload(msgspec.Struct, frozen=True, kw_only=True):
    """What every control payload shares: a closed CBOR map whose keys are the
    Struct fields. Subclasses name the map (for errors and paths) and give
    the check of each required and optional key; encoding leaves out optional
    keys that are ``None``, decoding turns arrays into tuples."""

    _WHAT: ClassVar[str]
    _REQUIRED: ClassVar[dict[str, _Check]]
    _OPTIONAL: ClassVar[dict[str, _Check]]

    def to_payload(self) -> bytes:
        m: dict[str, Any] = {key: getattr(self, key) for key in self._REQUIRED}
        for key in self._OPTIONAL:
            _put(m, key, getattr(self, key))
        return dumps(m)

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        w = cls._WHAT
        m = _map(payload, w, frozenset(cls._REQUIRED), frozenset(cls._OPTIONAL))
        fields = {key: _field(m, w, key, *check) for key, check in (cls._REQUIRED | cls._OPTIONAL).items()}
        return cls(**{key: tuple(v) if type(v) is list else v for key, v in fields.items()})


# --------------------------------------------------------------- payloads


class HandshakeRequest(_ControlPayload, frozen=True, kw_only=True):
    """Client → server, the first frame of every RFC 002 connection."""

    _WHAT = "handshake"
    _REQUIRED = {"version": _UINT, "max_msg_size": _UINT}
    _OPTIONAL = {"did": _TEXT, "token": _BYTES, "extensions": _TEXT_LIST}

    version: int = TRANSPORT_VERSION
    max_msg_size: int
    did: str | None = None
    token: bytes | None = None
    extensions: tuple[str, ...] | None = None


class HandshakeResponse(_ControlPayload, frozen=True, kw_only=True):
    """Server → client answer to the HANDSHAKE; ``accepted=False`` carries ``error``."""

    _WHAT = "handshake"
    _REQUIRED = {"version": _UINT, "accepted": _BOOL, "max_msg_size": _UINT}
    _OPTIONAL = {"error": _TEXT, "extensions": _TEXT_LIST}

    version: int = TRANSPORT_VERSION
    accepted: bool
    max_msg_size: int
    error: str | None = None
    extensions: tuple[str, ...] | None = None


class GoAway(_ControlPayload, frozen=True, kw_only=True):
    """RFC 002 §4.5: the sender stops taking new work; ``last_id`` is the last
    message id it will still process."""

    _WHAT = "goaway"
    _REQUIRED = {"reason": _UINT}
    _OPTIONAL = {"message": _TEXT, "last_id": _ID}

    reason: int
    message: str | None = None
    last_id: bytes | None = None


class TransportError(_ControlPayload, frozen=True, kw_only=True):
    """RFC 002 §4.5 transport ERROR frame payload (``msg_id`` names the message
    that caused it, when there was one)."""

    _WHAT = "error"
    _REQUIRED = {"code": _UINT, "message": _TEXT}
    _OPTIONAL = {"msg_id": _ID}

    code: int
    message: str
    msg_id: bytes | None = None


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
