"""Text that came from the network, made safe to show.

Peers choose the text of error messages, GOAWAY reasons, progress notes,
descriptor notes and every string in a body. Printed as is, an escape
sequence in it would drive the reader's terminal (retitle it, hide the rest
of a line, fake a prompt), a newline would forge a second log line, and a
bidirectional override would show text in another order than it has. So
everything ampcap prints or logs from a peer goes through one of these:

* :func:`printable` for plain text (log lines, CLI messages): control
  characters and the bidi controls become visible backslash escapes, so the
  text stays on one line and means what it shows;
* :func:`json_safe` for a JSON document written with ``ensure_ascii=False``:
  ``json`` escapes C0 itself but leaves DEL, C1 (``U+009B`` is a one-character
  CSI) and the bidi controls raw; this writes them as ``\\uXXXX``, which keeps
  the document valid and its meaning unchanged (such characters can only
  occur inside JSON strings).

A peer also chooses how long its text is: up to a whole message, 16 MiB.
Every log line and every error message that quotes a peer's value (a DID, a
version, a capability name, a GOAWAY or ERROR reason, an error built from
those) takes it through :func:`shown` or :func:`quoted`, which keep the
first :data:`PEER_TEXT_LIMIT` characters and say how long it was: the -v log
gets no 16 MiB line per rejected message, and the ERROR we send back does not
echo the request.
"""

from __future__ import annotations

__all__ = ["printable", "json_safe", "shown", "quoted", "PEER_TEXT_LIMIT", "MESSAGE_LIMIT"]

PEER_TEXT_LIMIT = 200  # characters of one peer-chosen value in a log line or an error message
# Characters of a message built around a few such values (an AmpError's, a
# close reason) that a log line shows: the values in it are cut already.
MESSAGE_LIMIT = 4 * PEER_TEXT_LIMIT

_C0 = range(0x00, 0x20)
_DEL_C1 = (0x7F, *range(0x80, 0xA0))
# Bidi marks, embeddings, overrides and isolates (Unicode UAX #9).
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SHORT = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}

_PRINTABLE = {c: _SHORT.get(c) or (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}")
              for c in (*_C0, *_DEL_C1, *_BIDI)}
_JSON = {c: f"\\u{c:04x}" for c in (*_DEL_C1, *_BIDI)}


def printable(text: str, limit: int | None = None) -> str:
    """``text`` with control and bidi characters as backslash escapes; with
    ``limit``, at most that many characters of it, and its length after."""
    if limit is not None and len(text) > limit:
        return text[:limit].translate(_PRINTABLE) + f"… ({len(text)} chars)"
    return text.translate(_PRINTABLE)


def shown(value: object, limit: int = PEER_TEXT_LIMIT) -> str:
    """A peer's value (anything with a ``str``) as it may stand inside a log
    line or a message: :func:`printable`, at most ``limit`` characters."""
    return printable(value if isinstance(value, str) else str(value), limit)


def quoted(value: object, limit: int = PEER_TEXT_LIMIT) -> str:
    """``repr(value)`` (quoted, escaped), of at most ``limit`` characters of
    a text and with its length when longer: for messages that quote what a
    peer sent (a text is cut before ``repr``, which would copy all of it)."""
    if not isinstance(value, str):
        return printable(repr(value), limit)
    if len(value) > limit:
        return repr(value[:limit]) + f"… ({len(value)} chars)"
    return repr(value)


def json_safe(document: str) -> str:
    """A JSON document (from ``json.dumps(..., ensure_ascii=False)``) with
    DEL, C1 and bidi characters written as ``\\uXXXX`` escapes."""
    return document.translate(_JSON)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 capability``, ``2 capabilities``, ``0 MCP servers``: a count with
    its noun agreeing (``plural`` when adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
