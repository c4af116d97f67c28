"""The AMP registries as data: message type codes (RFC 001 §4.3) and error
codes (RFC 001 §15.3).

Everything that needs a type name, an error name, its category or its retry
flag reads it from here, so the tables exist exactly once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MessageType",
    "ErrorCode",
    "ErrorInfo",
    "ERRORS",
    "CATEGORY_BY_RANGE",
    "type_name",
    "is_known_type",
    "error_info",
    "error_body",
]


class MessageType(enum.IntEnum):
    """Every type code RFC 001 §4.3 assigns (v0.42)."""

    PING = 0x01
    PONG = 0x02
    ACK = 0x03
    PROC_OK = 0x04
    PROC_FAIL = 0x05
    CONTACT_REQUEST = 0x06
    CONTACT_RESPONSE = 0x07
    CONTACT_REVOKE = 0x08
    PROCESSING = 0x09
    PROGRESS = 0x0A
    INPUT_REQUIRED = 0x0B
    ERROR = 0x0F
    MESSAGE = 0x10
    REQUEST = 0x11
    RESPONSE = 0x12
    STREAM_START = 0x13
    STREAM_DATA = 0x14
    STREAM_END = 0x15
    BATCH = 0x16
    CAP_QUERY = 0x20
    CAP_DECLARE = 0x21
    CAP_INVOKE = 0x22
    CAP_RESULT = 0x23
    DOC_SEND = 0x30
    DOC_REQUEST = 0x31
    CRED_ISSUE = 0x40
    CRED_REQUEST = 0x41
    CRED_PRESENT = 0x42
    CRED_VERIFY = 0x43
    DELEG_GRANT = 0x50
    DELEG_REVOKE = 0x51
    DELEG_QUERY = 0x52
    PRESENCE = 0x60
    PRESENCE_QUERY = 0x61
    PRESENCE_SUB = 0x62
    PRESENCE_UNSUB = 0x63
    HELLO = 0x70
    HELLO_ACK = 0x71
    HELLO_REJECT = 0x72
    EXTENSION = 0xF0


_KNOWN_TYPES = frozenset(int(t) for t in MessageType)


def is_known_type(code: int) -> bool:
    """True when ``code`` is assigned in RFC 001 §4.3 (unassigned → 1005)."""
    return code in _KNOWN_TYPES


def type_name(code: int) -> str:
    """The registry name of a type code, or ``UNKNOWN(0x..)`` for dumps."""
    try:
        return MessageType(code).name
    except ValueError:
        return f"UNKNOWN(0x{code:02X})"


class ErrorCode(enum.IntEnum):
    """Every error code of RFC 001 §15.3."""

    INVALID_MESSAGE = 1001
    INVALID_SIGNATURE = 1002
    INVALID_TIMESTAMP = 1003
    UNSUPPORTED_VERSION = 1004
    UNKNOWN_TYPE = 1005
    RECIPIENT_NOT_FOUND = 2001
    ENDPOINT_UNREACHABLE = 2002
    RELAY_REJECTED = 2003
    TTL_EXPIRED = 2004
    UNAUTHORIZED = 3001
    CONTACT_REQUIRED = 3002
    CONTACT_DENIED = 3003
    DELEGATION_INVALID = 3004
    RATE_LIMITED = 3005
    BAD_REQUEST = 4001
    CAPABILITY_NOT_FOUND = 4002
    VERSION_MISMATCH = 4003
    SCHEMA_VIOLATION = 4004
    INTERNAL_ERROR = 5001
    UNAVAILABLE = 5002
    TIMEOUT = 5003
    OVERLOADED = 5004


# RFC 001 §15.2: the thousands digit names the category.
CATEGORY_BY_RANGE = {1: "protocol", 2: "routing", 3: "security", 4: "client", 5: "server"}


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: int
    name: str
    category: str
    retry: bool


# Retry column of RFC 001 §15.3 ("Yes" and "Yes (with backoff)" are both True).
_RETRYABLE = {2001, 2002, 2003, 3005, 5001, 5002, 5003, 5004}

ERRORS: dict[int, ErrorInfo] = {
    int(c): ErrorInfo(int(c), c.name, CATEGORY_BY_RANGE[int(c) // 1000], int(c) in _RETRYABLE)
    for c in ErrorCode
}


def error_info(code: int) -> ErrorInfo:
    """Registry entry for ``code``; unregistered codes get a derived entry
    (vendor codes x900–x999 are legal and must still be printable)."""
    info = ERRORS.get(code)
    if info is not None:
        return info
    category = CATEGORY_BY_RANGE.get(code // 1000, "unknown")
    return ErrorInfo(code, f"ERROR_{code}", category, False)


def error_body(code: int, message: str, details: Any = None, *, batch_index: int | None = None) -> dict[str, Any]:
    """An ERROR body (RFC 001 §4.4 ``error-body``) built from the registry."""
    info = error_info(code)
    body: dict[str, Any] = {
        "code": code,
        "category": info.category,
        "message": message,
        "retry": info.retry,
    }
    if details is not None:
        body["details"] = details
    if batch_index is not None:
        body["batch_index"] = batch_index
    return body
