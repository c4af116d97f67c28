"""The connection state machines as data (RFC 002 §3.1, RFC 001 §13.5).

Two tables live here and nowhere else:

* ``CONN_TRANSITIONS`` maps ``(ConnState, ConnInput)`` to the next
  ``ConnState``: the RFC 002 canonical sequence
  ``IDLE -> CONNECTED -> HANDSHAKE -> OPEN -> DRAINING -> CLOSED``.
  ampcap keeps a connection in ``HANDSHAKE`` until *both* the transport
  HANDSHAKE frames and the AMP HELLO negotiation are done, because RFC 002
  §3.3 forbids non-handshake AMP messages until the version is negotiated
  (ruling R4); ``OPEN`` therefore means "application messages may flow".
* ``HELLO_TRANSITIONS`` maps ``(HelloState, HelloInput)`` to the next
  ``HelloState``, exactly the RFC 001 §13.5 machine plus ``PRECONFIGURED``
  for raw framing without HELLO (ruling R3; RFC 002 §3.3 allows skipping
  HELLO only with a preconfigured major version).

Any pair missing from a table is a protocol violation: :func:`advance` and
:func:`advance_hello` raise :class:`StateViolation` (an ``AmpError``), and the
connection decides which ERROR that becomes. The tables know nothing about
roles; the connection picks which inputs it feeds for client and server.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from ..errors import RemoteProtocolError

__all__ = [
    "TableEnum",
    "ConnState",
    "ConnInput",
    "HelloState",
    "HelloInput",
    "CONN_TRANSITIONS",
    "HELLO_TRANSITIONS",
    "StateViolation",
    "advance",
    "advance_hello",
    "reachable",
    "render_table",
]


class TableEnum(enum.Enum):
    """An enum used as a key of a transition table. Members are singletons
    compared by identity, so hashing by identity is consistent with equality;
    it is done in C, where Enum's own ``__hash__`` is a Python call, and every
    message crosses a few of these tables."""

    __hash__ = object.__hash__


class ConnState(TableEnum):
    IDLE = "IDLE"  # object built, transport not yet started
    CONNECTED = "CONNECTED"  # transport up, no HANDSHAKE frame exchanged yet
    HANDSHAKE = "HANDSHAKE"  # transport HANDSHAKE and/or HELLO negotiation in progress
    OPEN = "OPEN"  # negotiated: application messages flow both ways
    DRAINING = "DRAINING"  # a GOAWAY was sent or received: no new work, replies still flow
    CLOSED = "CLOSED"  # terminal


class ConnInput(TableEnum):
    START = "START"  # the transport connection exists
    SEND_HANDSHAKE = "SEND_HANDSHAKE"  # client: handshake request queued
    RECV_HANDSHAKE = "RECV_HANDSHAKE"  # server: request received (and answered)
    RECV_HANDSHAKE_REPLY = "RECV_HANDSHAKE_REPLY"  # client: accepted response received
    SKIP_HANDSHAKE = "SKIP_HANDSHAKE"  # raw framing has no transport handshake (R3)
    HELLO_MESSAGE = "HELLO_MESSAGE"  # HELLO / HELLO_ACK / HELLO_REJECT sent or received
    NEGOTIATED = "NEGOTIATED"  # the HELLO machine reached NEGOTIATED
    RECV_PING = "RECV_PING"
    RECV_PONG = "RECV_PONG"
    SEND_PING = "SEND_PING"
    RECV_MESSAGE = "RECV_MESSAGE"  # an application AMP message arrived
    SEND_MESSAGE = "SEND_MESSAGE"  # the local side sends an application message
    SEND_GOAWAY = "SEND_GOAWAY"
    RECV_GOAWAY = "RECV_GOAWAY"
    RECV_ERROR = "RECV_ERROR"  # a transport ERROR frame: the peer is closing
    FAIL = "FAIL"  # fatal protocol error, timeout or refused handshake
    EOF = "EOF"  # the stream ended: the peer closed, or the transport broke
    INPUT_ENDED = "INPUT_ENDED"  # the peer closed its sending side only (half-close)
    CLOSE = "CLOSE"  # the local side closes


class HelloState(TableEnum):
    UNNEGOTIATED = "UNNEGOTIATED"
    WAIT_ACK = "WAIT_ACK"
    SELECT = "SELECT"
    NEGOTIATED = "NEGOTIATED"
    FAILED = "FAILED"


class HelloInput(TableEnum):
    SEND_HELLO = "SEND_HELLO"
    RECV_HELLO = "RECV_HELLO"
    RECV_HELLO_ACK = "RECV_HELLO_ACK"
    RECV_HELLO_REJECT = "RECV_HELLO_REJECT"
    SEND_HELLO_ACK = "SEND_HELLO_ACK"
    SEND_HELLO_REJECT = "SEND_HELLO_REJECT"
    PRECONFIGURED = "PRECONFIGURED"  # raw mode without HELLO: version fixed by config


S, I = ConnState, ConnInput

_LIVE = (S.CONNECTED, S.HANDSHAKE, S.OPEN, S.DRAINING)

CONN_TRANSITIONS: Mapping[tuple[ConnState, ConnInput], ConnState] = {
    (S.IDLE, I.START): S.CONNECTED,
    (S.CONNECTED, I.SEND_HANDSHAKE): S.HANDSHAKE,
    (S.CONNECTED, I.RECV_HANDSHAKE): S.HANDSHAKE,
    (S.CONNECTED, I.SKIP_HANDSHAKE): S.HANDSHAKE,
    (S.HANDSHAKE, I.RECV_HANDSHAKE_REPLY): S.HANDSHAKE,
    (S.HANDSHAKE, I.HELLO_MESSAGE): S.HANDSHAKE,
    (S.HANDSHAKE, I.NEGOTIATED): S.OPEN,
    # Keepalive works as soon as frames can flow (after the client's request).
    **{(s, i): s for s in (S.HANDSHAKE, S.OPEN, S.DRAINING)
       for i in (I.RECV_PING, I.RECV_PONG, I.SEND_PING)},
    (S.OPEN, I.RECV_MESSAGE): S.OPEN,
    (S.OPEN, I.SEND_MESSAGE): S.OPEN,
    # While draining, replies to earlier work still flow in both directions;
    # the connection refuses *new* invokes itself (5002).
    (S.DRAINING, I.RECV_MESSAGE): S.DRAINING,
    (S.DRAINING, I.SEND_MESSAGE): S.DRAINING,
    (S.OPEN, I.SEND_GOAWAY): S.DRAINING,
    (S.OPEN, I.RECV_GOAWAY): S.DRAINING,
    (S.DRAINING, I.SEND_GOAWAY): S.DRAINING,
    (S.DRAINING, I.RECV_GOAWAY): S.DRAINING,
    # A half-close is a GOAWAY without words: nothing new can come, replies can go.
    (S.OPEN, I.INPUT_ENDED): S.DRAINING,
    (S.DRAINING, I.INPUT_ENDED): S.DRAINING,
    # GOAWAY before negotiation: nothing is in flight, so it is a close.
    (S.HANDSHAKE, I.SEND_GOAWAY): S.CLOSED,
    (S.HANDSHAKE, I.RECV_GOAWAY): S.CLOSED,
    **{(s, i): S.CLOSED for s in _LIVE for i in (I.RECV_ERROR, I.FAIL, I.EOF, I.CLOSE)},
    (S.IDLE, I.CLOSE): S.CLOSED,
    (S.IDLE, I.FAIL): S.CLOSED,
    # Closing twice is harmless; everything else after CLOSED is refused.
    (S.CLOSED, I.CLOSE): S.CLOSED,
    (S.CLOSED, I.EOF): S.CLOSED,
}

H, HI = HelloState, HelloInput

HELLO_TRANSITIONS: Mapping[tuple[HelloState, HelloInput], HelloState] = {
    (H.UNNEGOTIATED, HI.SEND_HELLO): H.WAIT_ACK,
    (H.UNNEGOTIATED, HI.RECV_HELLO): H.SELECT,
    (H.UNNEGOTIATED, HI.PRECONFIGURED): H.NEGOTIATED,
    (H.WAIT_ACK, HI.RECV_HELLO_ACK): H.NEGOTIATED,
    (H.WAIT_ACK, HI.RECV_HELLO_REJECT): H.FAILED,
    (H.SELECT, HI.SEND_HELLO_ACK): H.NEGOTIATED,
    (H.SELECT, HI.SEND_HELLO_REJECT): H.FAILED,
}


class StateViolation(RemoteProtocolError):
    """An input that the current state does not allow (code 1001 by default)."""

    def __init__(self, state: enum.Enum, event: enum.Enum, code: int = 1001) -> None:
        super().__init__(code, f"{event.value} is not allowed in state {state.value}", path="state")
        self.state = state
        self.event = event


def advance(state: ConnState, event: ConnInput) -> ConnState:
    """The next connection state, or :class:`StateViolation`."""
    try:
        return CONN_TRANSITIONS[(state, event)]
    except KeyError:
        raise StateViolation(state, event) from None


def advance_hello(state: HelloState, event: HelloInput) -> HelloState:
    """The next HELLO state, or :class:`StateViolation`."""
    try:
        return HELLO_TRANSITIONS[(state, event)]
    except KeyError:
        raise StateViolation(state, event) from None


def reachable(table: Mapping[tuple[enum.Enum, enum.Enum], enum.Enum], start: enum.Enum) -> set[enum.Enum]:
    """Every state reachable from ``start`` through ``table``."""
    seen = {start}
    frontier = [start]
    while frontier:
        here = frontier.pop()
        for (src, _), dst in table.items():
            if src is here and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    return seen


def render_table(table: Mapping[tuple[enum.Enum, enum.Enum], enum.Enum]) -> str:
    """The table as Markdown rows (``state | input | next``), for docs and reviews."""
    lines = ["| state | input | next |", "|---|---|---|"]
    for (src, event), dst in table.items():
        lines.append(f"| {src.value} | {event.value} | {dst.value} |")
    return "\n".join(lines)
