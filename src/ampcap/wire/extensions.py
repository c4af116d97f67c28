"""ampcap's extensions to AMP, as announced in HELLO, and the cancel message.

RFC 001 §13.3 lets a HELLO list ``extensions`` (text). ampcap offers the
names in :data:`OFFERED`; the side that answers puts in its HELLO_ACK
``extensions`` those it offers too (the intersection; the key is absent when
it is empty, so a HELLO_ACK to a peer that offered nothing is the RFC's
``{"selected": ...}`` exactly). Both sides then know the same *agreed* set,
and nothing that belongs to an extension is ever sent to a peer outside it.
A connection with no HELLO (raw framing with a preconfigured version, an
HTTP POST) agrees on nothing. The names and the messages are documented in
``docs/steering.md``.

The cancel message (:data:`CANCEL`): an application message of type
EXTENSION (0xF0, RFC 001 §4.3's vendor range) whose signed body is
``{"ampcap": "cancel", "invoke": <the invoke's 16-byte id>}`` and whose
``reply_to`` is that id too. It gets no reply of its own: what answers it is
the invoke's one terminal reply (the result when it won the race, else the
CAP_RESULT error 5003 ``{"cancelled": true}``). Sans-I/O, no state.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CANCEL", "DEPRECATION", "LISTING", "TRACE", "OFFERED", "agreed", "offered_by", "cancel_body",
           "cancelled_invoke", "CANCELLED_DETAILS"]

CANCEL = "ampcap.cancel"
DEPRECATION = "ampcap.deprecation"
LISTING = "ampcap.list-all"  # R22's CAP_QUERY "*", announced for other implementations to see
OFFERED: tuple[str, ...] = (CANCEL, DEPRECATION, LISTING)
# The caller's trace context in ext (wire/trace_context.py): offered only by
# a process that traces (net/features/tracing.py adds it to its connections'
# offer), so a peer that does not trace is never sent the entry.
TRACE = "ampcap.trace"

CANCELLED_DETAILS = {"cancelled": True}
_MAX_NAMES = 64  # a HELLO listing more is read for its first 64 only


def offered_by(body: Any) -> frozenset[str]:
    """The extension names a HELLO or HELLO_ACK body lists (malformed: none)."""
    names = body.get("extensions") if type(body) is dict else None
    if type(names) is not list:
        return frozenset()
    return frozenset(n for n in names[:_MAX_NAMES] if type(n) is str)


def agreed(ours: tuple[str, ...], body: Any) -> frozenset[str]:
    """Ours that the peer's HELLO (or HELLO_ACK) body offers too."""
    if not ours:
        return frozenset()
    return frozenset(ours) & offered_by(body)


def cancel_body(invoke_id: bytes) -> dict[str, Any]:
    return {"ampcap": "cancel", "invoke": invoke_id}


def cancelled_invoke(body: Any) -> bytes | None:
    """The invoke id an EXTENSION body asks to cancel, or None when the body
    is not ampcap's cancel (then the message is not ours: 1005 as before)."""
    if type(body) is not dict or body.get("ampcap") != "cancel":
        return None
    invoke = body.get("invoke")
    return invoke if type(invoke) is bytes and len(invoke) == 16 else None
