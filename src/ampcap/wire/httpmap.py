"""What RFC 002 §5–§6 fix for HTTP and WebSocket, as tables and a codec.

* HTTP status ↔ AMP code (§6.4), both ways: a client maps a refusal to the
  code its caller sees; a server picks the status for a code.
* WebSocket close code ↔ AMP code (§5.4).
* The §6.2 polling wrapper ``{"messages": [* bstr], "next_cursor": tstr /
  null, "has_more": bool}``: built deterministically, and read strictly (any
  other shape is a malformed wrapper, 1001, Appendix A.4). The messages stay
  the raw bytes received; nothing re-encodes them.

Sans-I/O: no sockets, no HTTP library; the edge (``net/transport/http_server.py``,
``net/transport/http_client.py``, ``net/transport/wsmessages.py``) uses these.
"""

from __future__ import annotations

from typing import Any

from ..errors import AmpError
from . import cbor

__all__ = ["HTTP_HINT", "code_for_status", "status_for_code", "WS_HINT", "code_for_close", "close_for_code",
           "encode_poll", "decode_poll", "CONTENT_TYPE", "TRANSPORT_VERSION_HEADER", "MAX_SIZE_HEADER",
           "WS_SUBPROTOCOL", "WS_OVERSIZE", "WS_NOT_BINARY", "WS_POLICY", "WS_NORMAL", "WS_GOING_AWAY"]

CONTENT_TYPE = "application/cbor"
TRANSPORT_VERSION_HEADER = "X-AMP-Transport-Version"  # value "1"
MAX_SIZE_HEADER = "X-AMP-Max-Message-Size"  # §5.3: the canonical size negotiation over HTTP and WS
WS_SUBPROTOCOL = "amp.v1"

# §6.4: the AMP hint of each status (None: success).
HTTP_HINT: dict[int, int | None] = {200: None, 202: None, 400: 1001, 401: 3001, 403: 3001, 404: 2001,
                                    413: 1001, 429: 2003, 500: 5001, 503: 2003}

# The status a server answers a refused submission with, by AMP code. Codes
# not listed: 400 for the message's own faults (1xxx, 4xxx), 500 otherwise.
_STATUS_FOR: dict[int, int] = {1001: 400, 1002: 401, 1003: 400, 1004: 400, 1005: 400, 2001: 404, 2002: 404,
                               2003: 429, 3001: 403, 5001: 500, 5002: 503, 5003: 503, 5004: 503}

WS_NORMAL, WS_GOING_AWAY, WS_PROTOCOL = 1000, 1001, 1002
WS_NOT_BINARY, WS_POLICY, WS_OVERSIZE, WS_INTERNAL = 1003, 1008, 1009, 1011
# §5.4: the AMP hint of each close code (None: a clean close).
WS_HINT: dict[int, int | None] = {WS_NORMAL: None, WS_GOING_AWAY: None, WS_PROTOCOL: 1001, WS_NOT_BINARY: 1001,
                                  WS_POLICY: 3001, WS_OVERSIZE: 1001, WS_INTERNAL: 5001}


def code_for_status(status: int) -> int | None:
    """The AMP code a client reports for HTTP ``status`` (None for 200/202)."""
    if status in HTTP_HINT:
        return HTTP_HINT[status]
    if 200 <= status < 300:
        return None
    return 1001 if 400 <= status < 500 else 5001


def status_for_code(code: int, *, authenticated: bool = True) -> int:
    """The HTTP status a server answers AMP ``code`` with. An auth failure is
    401 when no principal was established (no token, or a bad one), 403 when
    the principal is known but not allowed (``from`` is someone else)."""
    if code == 3001 and not authenticated:
        return 401
    if code in _STATUS_FOR:
        return _STATUS_FOR[code]
    return 400 if code < 2000 or 4000 <= code < 5000 else 500


def code_for_close(close_code: int) -> int | None:
    """The AMP code behind a WebSocket close (None: a clean close)."""
    if close_code in WS_HINT:
        return WS_HINT[close_code]
    return 5002 if close_code == 1006 else 1001  # 1006: the connection dropped without a close frame


def close_for_code(code: int | None, *, oversize: bool = False) -> int:
    """The close code for a connection that ended with AMP ``code``."""
    if code is None:
        return WS_NORMAL
    if oversize:
        return WS_OVERSIZE
    if code in (3001, 1002, 2003, 5004):
        return WS_POLICY
    if code in (1001, 1004, 1005):
        return WS_PROTOCOL
    if code == 5001:
        return WS_INTERNAL
    return WS_GOING_AWAY  # timeouts, shutdown (5002, 5003)


def encode_poll(messages: list[bytes], next_cursor: str | None, has_more: bool) -> bytes:
    """The §6.2 wrapper, deterministic CBOR."""
    return cbor.dumps({"messages": messages, "next_cursor": next_cursor, "has_more": has_more})


def decode_poll(data: bytes, limits: cbor.DecodeLimits = cbor.DEFAULT_LIMITS) -> tuple[list[bytes], str | None, bool]:
    """Read a §6.2 wrapper strictly; ``AmpError(1001)`` for any other shape
    (Appendix A.4). Unknown extra keys are refused too: the wrapper is fixed."""
    value: Any = cbor.loads(data, limits)
    if type(value) is not dict or set(value) != {"messages", "next_cursor", "has_more"}:
        raise AmpError(1001, "poll response is not the RFC 002 §6.2 wrapper "
                             "(messages, next_cursor, has_more)")
    messages, cursor, more = value["messages"], value["next_cursor"], value["has_more"]
    if type(messages) is not list or not all(type(m) is bytes for m in messages):
        raise AmpError(1001, "poll response: messages must be an array of byte strings", path="messages")
    if cursor is not None and type(cursor) is not str:
        raise AmpError(1001, "poll response: next_cursor must be text or null", path="next_cursor")
    if type(more) is not bool:
        raise AmpError(1001, "poll response: has_more must be a boolean", path="has_more")
    return messages, cursor, more
