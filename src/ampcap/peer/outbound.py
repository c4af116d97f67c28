"""What the layers above a Connection ask it to send.

An :class:`Outbound` is a message *before* it is sealed: the connection adds
``v``, ``from``, the signature and (unless given) a fresh id and ``ts``. The
executor and the invoker produce only these, never bytes, so they stay
independent of keys and framing.

Retries (RFC 001 §16.3) must be recognisable as the *same* message by the
receiver's idempotency check (ruling R8 compares a hash of Sig_Input), so a
retry repeats every signed header: ``msg_id``, ``ts_ms`` and ``ttl_ms``.
Ed25519 is deterministic, so re-sealing identical fields yields identical
bytes.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.envelope import Envelope
from ..wire.registry import MessageType
from ..caps.bodies import result_error

__all__ = ["Outbound", "Send", "Log", "reply_to", "error_reply", "stand_in_for_oversize", "ConnKey"]

# The executor and invoker never look inside a connection key: the daemon
# chooses it (a Connection object, an int...) and gets it back in actions.
ConnKey = Hashable


# gc=False: an Outbound holds only a body (decoded or caller-made data, which
# cannot point back at it) and scalars, so it can never be part of a reference
# cycle. The executor keeps every terminal reply for retries (R8): untracked,
# those thousands of cached replies cost the garbage collector nothing.
class Outbound(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message to seal and send on one connection."""

    typ: int
    """Message type code (RFC 001 §4.3)."""
    body: Any
    """The plain body; the connection encodes it deterministically."""
    reply_to: bytes | None = None
    """Id of the message this answers (ERROR, CAP_RESULT, PROGRESS...)."""
    thread_id: bytes | None = None
    """Conversation id, copied from the request when it had one."""
    to: str | tuple[str, ...] | None = None
    """Recipient DID(s); ``None`` means the DID the connection negotiated."""
    msg_id: bytes | None = None
    """Reuse an id (retries, §16.3); ``None`` lets the connection pick a fresh one."""
    ts_ms: int | None = None
    """Reuse a timestamp (retries: the signed content must not change); ``None`` = now."""
    ttl_ms: int | None = None
    """Lifetime in ms; ``None`` = the connection's default."""
    body_cbor: bytes | None = None
    """``body`` already encoded deterministically by whoever built this (it
    had to check that the body encodes at all); saves encoding it twice."""
    ext: dict[str, Any] | None = None
    """The envelope's ``ext`` map (RFC 001 §4.6), signed with the rest."""
    encrypt: bool = False
    """Authcrypt the body to the recipient (RFC 001 §8.5): set on replies to
    an encrypted request, so what was private stays private."""
    wire: bytes | None = None
    """The message already sealed (a terminal reply, ruling R8): these bytes
    are sent as they are, and every field above only describes them."""

    def __post_init__(self) -> None:
        if self.msg_id is not None and len(self.msg_id) != 16:
            raise ValueError("msg_id must be 16 bytes (RFC 001 §4.2)")
        if self.ts_ms is not None and self.ts_ms < 0:
            raise ValueError("ts_ms must not be negative")
        if self.ttl_ms is not None and self.ttl_ms < 0:
            raise ValueError("ttl_ms must not be negative")


def reply_to(request: Envelope, typ: int, body: Any, *, encrypt: bool = False) -> Outbound:
    """A reply to ``request``: ``reply_to`` = its id, same thread, addressed
    to its sender (not merely "the peer": over a relay they differ);
    ``encrypt`` when the request came encrypted."""
    return Outbound(typ=typ, body=body, reply_to=request.id, thread_id=request.thread_id,
                    to=request.sender, encrypt=encrypt)


def error_reply(request: Envelope, error: AmpError, *, encrypt: bool = False) -> Outbound:
    """The AMP ERROR answering ``request`` (RFC 001 §15.1)."""
    return reply_to(request, int(MessageType.ERROR), error.to_body(), encrypt=encrypt)


# Replies that are not the last word: dropped when too large, nothing stands in.
_INTERIM = frozenset({int(MessageType.ACK), int(MessageType.PROCESSING), int(MessageType.PROGRESS)})


def stand_in_for_oversize(out: Outbound, size: int, limit: int) -> Outbound | None:
    """What to send when reply ``out`` turned out larger than the connection's
    maximum message size (RFC 002 §3.2): a terminal reply must still arrive,
    so a CAP_RESULT becomes a CAP_RESULT error 5001 and any other terminal
    reply an ERROR 5001, both small. ``None`` for an interim reply (PROGRESS,
    PROCESSING, ACK) and for a message that answers nothing."""
    if out.reply_to is None or out.typ in _INTERIM:
        return None
    error = AmpError(5001, f"the reply ({size} bytes as a message) is larger than this connection's "
                           f"{limit}-byte maximum")
    if out.typ == int(MessageType.CAP_RESULT):
        body = result_error(error)
        typ = out.typ
    else:
        body, typ = error.to_body(), int(MessageType.ERROR)
    return Outbound(typ=typ, body=body, reply_to=out.reply_to, thread_id=out.thread_id, to=out.to,
                    encrypt=out.encrypt)


class Send(msgspec.Struct, frozen=True):
    """Action: seal and send ``out`` on the connection the daemon knows as ``conn``."""

    conn: ConnKey
    out: Outbound


class Log(msgspec.Struct, frozen=True):
    """Action: something worth an operator's attention (``level`` from ``logging``).

    ``topic`` names lines a peer can cause at will; the daemon passes those
    through a :class:`~ampcap.peer.logthrottle.LogThrottle`."""

    level: int
    message: str
    topic: str | None = None
