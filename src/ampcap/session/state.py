"""RFC 006 §8 state machines as tables (and nothing else lives here).

:data:`SESSION_TRANSITIONS` is §8.1, the life of a session as its provider
keeps it; :data:`REQUEST_TRANSITIONS` is §8.2, one session-scoped request as
either side follows it (the provider while it validates and executes, the
client while provisional replies arrive before the terminal one).

A pair missing from a table is not allowed: :func:`advance_session` raises
``AmpError(4001)`` (RFC 006 §9: a state failure on a well-formed request,
"unknown/expired/closed session for requested op"), :func:`advance_request`
``AmpError(4001)`` too (a reply the request's state does not admit).

The RFC's diagram sends FAILED/CLOSED/EXPIRED on to a TERMINAL state; here
terminal is a property of those three (:data:`TERMINAL`), since no input
moves a session out of any of them: only a repeated close on CLOSED is
accepted, as the idempotent success §5.6 and vector A.12 ask for.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import AmpError
from ..peer.state import TableEnum

__all__ = [
    "SessionState",
    "SessionInput",
    "SESSION_TRANSITIONS",
    "TERMINAL",
    "advance_session",
    "RequestState",
    "RequestInput",
    "REQUEST_TRANSITIONS",
    "advance_request",
]

BAD_REQUEST = 4001


class SessionState(TableEnum):
    NONE = "none"  # no record yet
    PENDING = "pending"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    CLOSING = "closing"
    CLOSED = "closed"
    EXPIRED = "expired"
    FAILED = "failed"


class SessionInput(TableEnum):
    INIT = "init"  # a valid init received
    ACCEPT = "accept"
    REJECT = "reject"
    UPDATE = "update"
    SUSPEND = "suspend"
    RESUME = "resume"
    CLOSE = "close"  # close requested
    FINALIZE = "finalize"  # close finalized
    TTL = "ttl"  # expires_at reached


S, I = SessionState, SessionInput

# §8.1, plus the self-loops §5 allows: update on a live session (§5.4), resume
# of an active one (§5.5: "allowed from suspended or active") and a repeated
# close (§5.6, A.12).
SESSION_TRANSITIONS: Mapping[tuple[SessionState, SessionInput], SessionState] = {
    (S.NONE, I.INIT): S.PENDING,
    (S.PENDING, I.ACCEPT): S.ACTIVE,
    (S.PENDING, I.REJECT): S.FAILED,
    (S.ACTIVE, I.SUSPEND): S.SUSPENDED,
    (S.ACTIVE, I.CLOSE): S.CLOSING,
    (S.ACTIVE, I.TTL): S.EXPIRED,
    (S.ACTIVE, I.UPDATE): S.ACTIVE,
    (S.ACTIVE, I.RESUME): S.ACTIVE,
    (S.SUSPENDED, I.RESUME): S.ACTIVE,
    (S.SUSPENDED, I.CLOSE): S.CLOSING,
    (S.SUSPENDED, I.TTL): S.EXPIRED,
    (S.SUSPENDED, I.UPDATE): S.SUSPENDED,
    (S.CLOSING, I.CLOSE): S.CLOSING,
    (S.CLOSING, I.FINALIZE): S.CLOSED,
    (S.CLOSING, I.TTL): S.CLOSED,  # a close under way is finished, not expired
    (S.CLOSED, I.CLOSE): S.CLOSED,
}

TERMINAL = frozenset({S.CLOSED, S.EXPIRED, S.FAILED})


def advance_session(state: SessionState, event: SessionInput) -> SessionState:
    try:
        return SESSION_TRANSITIONS[(state, event)]
    except KeyError:
        raise AmpError(BAD_REQUEST, f"session is {state.value}: cannot {event.value}") from None


class RequestState(TableEnum):
    RECEIVED = "received"
    VALIDATING = "validating"
    REJECTED = "rejected"
    EXECUTING = "executing"
    TERMINAL_RESPONSE = "terminal_response"
    DONE = "done"


class RequestInput(TableEnum):
    VALIDATE = "validate"
    REJECT = "reject"  # ERROR 1xxx/3xxx/4xxx/5xxx
    ACCEPT = "accept"
    PROVISIONAL = "provisional"  # PROCESSING / PROGRESS / INPUT_REQUIRED
    TERMINAL = "terminal"  # RESPONSE / CAP_RESULT sent or received
    FINISH = "finish"


R, Q = RequestState, RequestInput

# §8.2. A client that only sees the wire starts at EXECUTING once its request
# is sent (it cannot see the provider's validation): a reply moves it on.
REQUEST_TRANSITIONS: Mapping[tuple[RequestState, RequestInput], RequestState] = {
    (R.RECEIVED, Q.VALIDATE): R.VALIDATING,
    (R.VALIDATING, Q.REJECT): R.REJECTED,
    (R.VALIDATING, Q.ACCEPT): R.EXECUTING,
    (R.EXECUTING, Q.PROVISIONAL): R.EXECUTING,
    (R.EXECUTING, Q.TERMINAL): R.TERMINAL_RESPONSE,
    (R.EXECUTING, Q.REJECT): R.REJECTED,  # as the client sees it: an ERROR instead of a result
    (R.TERMINAL_RESPONSE, Q.FINISH): R.DONE,
}


def advance_request(state: RequestState, event: RequestInput) -> RequestState:
    try:
        return REQUEST_TRANSITIONS[(state, event)]
    except KeyError:
        raise AmpError(BAD_REQUEST, f"request is {state.value}: a {event.value} reply is not allowed") from None
