"""Events a :class:`~ampcap.peer.connection.Connection` reports to its owner.

Past-tense names for things that happened on the receive side (h2 style);
each event is small and immutable.
"""

from __future__ import annotations

import msgspec

from ..errors import AmpError
from ..wire.envelope import Envelope
from ..wire.receive import Inbound

__all__ = [
    "Event",
    "HandshakeCompleted",
    "Negotiated",
    "MessageReceived",
    "MessageRejected",
    "PingAcknowledged",
    "GoAwayReceived",
    "InputEnded",
    "ConnectionTerminated",
]


class HandshakeCompleted(msgspec.Struct, frozen=True, kw_only=True):
    """The RFC 002 transport HANDSHAKE is done (skipped under raw framing)."""

    max_msg_size: int  # the effective maximum payload both sides honour
    peer_did_hint: str | None  # the client's unauthenticated ``did`` (server side)


class Negotiated(msgspec.Struct, frozen=True, kw_only=True):
    """HELLO negotiation finished: application messages may flow (OPEN).

    Under raw framing with a preconfigured version this comes at start with
    ``peer_did=None``, and may come once more when the peer's own HELLO is
    accepted and names it.
    """

    version: str  # the selected semver string, e.g. "1.0"
    peer_did: str | None  # the signed ``from`` of the peer's HELLO / HELLO_ACK


class MessageReceived(msgspec.Struct, frozen=True, kw_only=True):
    """An application message that passed every receive check."""

    inbound: Inbound


class MessageRejected(msgspec.Struct, frozen=True, kw_only=True):
    """An incoming message failed a check. The connection already queued the
    ERROR reply (AMP ERROR when the sender could be read, else a transport
    ERROR frame); this event is for logs and metrics."""

    error: AmpError
    message_id: bytes | None
    # The message's envelope when its bytes decoded to one, else None.
    envelope: Envelope | None = None
    # Whether the signature verified before the check failed. Only then is
    # what the envelope claims (``from``, ``reply_to``) true, and the daemon
    # may end the call it answers rather than leave it waiting for its
    # timeout; an unverified one could be anybody's forgery.
    authenticated: bool = False


class PingAcknowledged(msgspec.Struct, frozen=True, kw_only=True):
    """A PONG answered our PING (keepalive round trip)."""

    payload: bytes


class GoAwayReceived(msgspec.Struct, frozen=True, kw_only=True):
    """The peer sent GOAWAY: it takes no new work; the connection is DRAINING."""

    reason: int
    message: str | None
    last_id: bytes | None


class InputEnded(msgspec.Struct, frozen=True, kw_only=True):
    """The peer closed its sending side cleanly but may still be reading (a
    TCP half-close, often after its GOAWAY). The connection is DRAINING: no
    new work can arrive, replies to earlier work still go out, and the owner
    closes it once nothing is left to answer (at the latest when the drain
    period ends)."""


class ConnectionTerminated(msgspec.Struct, frozen=True, kw_only=True):
    """The connection is CLOSED (always the last event).

    ``code`` is the AMP error code that ended it (ours or the peer's), or
    ``None`` for an orderly close or a plain EOF.
    """

    code: int | None
    reason: str
    by_peer: bool = False


Event = (HandshakeCompleted | Negotiated | MessageReceived | MessageRejected | PingAcknowledged
         | GoAwayReceived | InputEnded | ConnectionTerminated)
