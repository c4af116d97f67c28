"""The RFC 007 §7 payment lifecycle as a table.

One state machine per ``payment_id`` (§2.2, payee profile). :data:`TABLE`
maps (state, event) to the next state; anything not in it is an invalid
transition (4103). The payee (:mod:`.payee`) never assigns a state itself:
it asks :func:`advance` with the event that happened.

One addition to §7's diagram, from §4.1 and §5.5: ``cancel`` is valid
"only before captured" and is "pre-capture termination", so an authorized
payment can be canceled too (its reservation released). §7 draws only
``QUOTED -> CANCELED``; §4.1's constraint is the wider rule and the table
follows it.

``failed``, ``canceled`` and ``refunded`` are terminal.
"""

from __future__ import annotations

import enum
from types import MappingProxyType

from ..errors import AmpError
from .codes import INVALID_TRANSITION

__all__ = ["State", "Event", "TABLE", "TERMINAL", "advance", "can"]


class State(enum.Enum):
    QUOTED = "quoted"
    AUTHORIZED = "authorized"
    CAPTURED = "captured"
    SETTLED = "settled"
    FAILED = "failed"
    CANCELED = "canceled"
    REFUND_PENDING = "refund_pending"
    REFUNDED = "refunded"


class Event(enum.Enum):
    QUOTE_EXPIRED = "quote expired/invalid"
    AUTHORIZED = "authorize_result authorized"
    AUTHORIZE_FAILED = "authorize_result failed"
    CANCELED = "cancel_result canceled"
    CAPTURED = "capture_result captured"
    CAPTURED_SETTLED = "capture_result settled"
    CAPTURE_FAILED = "capture_result failed"
    SETTLEMENT_FINAL = "settlement final"
    REFUND_PENDING = "refund_result refund_pending"
    REFUND_FINAL = "refund_result refunded"
    REFUND_FAILED = "refund_result failed"


S, E = State, Event
TABLE = MappingProxyType({
    (S.QUOTED, E.AUTHORIZED): S.AUTHORIZED,
    (S.QUOTED, E.CANCELED): S.CANCELED,
    (S.QUOTED, E.QUOTE_EXPIRED): S.FAILED,
    # §5.3: an authorization answers "authorized" or a terminal failure.
    (S.QUOTED, E.AUTHORIZE_FAILED): S.FAILED,
    (S.AUTHORIZED, E.CAPTURED): S.CAPTURED,
    (S.AUTHORIZED, E.CAPTURED_SETTLED): S.SETTLED,
    (S.AUTHORIZED, E.CAPTURE_FAILED): S.FAILED,
    (S.AUTHORIZED, E.CANCELED): S.CANCELED,  # §4.1 / §5.5, see the module note
    (S.CAPTURED, E.SETTLEMENT_FINAL): S.SETTLED,
    (S.CAPTURED, E.REFUND_PENDING): S.REFUND_PENDING,
    (S.SETTLED, E.REFUND_PENDING): S.REFUND_PENDING,
    (S.REFUND_PENDING, E.REFUND_FINAL): S.REFUNDED,
    (S.REFUND_PENDING, E.REFUND_FAILED): S.FAILED,
})
TERMINAL = frozenset({S.FAILED, S.CANCELED, S.REFUNDED})


def can(state: State, event: Event) -> bool:
    return (state, event) in TABLE


def advance(state: State, event: Event) -> State:
    """The next state, or ``AmpError(4103)``."""
    try:
        return TABLE[(state, event)]
    except KeyError:
        raise AmpError(INVALID_TRANSITION, f"{event.value} is not valid in state {state.value!r}") from None
