"""The three state machines of RFC 003 §6 as data.

Each machine is one table ``(state, event) -> state``; a pair that is not in
the table is refused (:class:`Refused`), like h2's stream machine. The queue
stores the state values (the enum values are what the store writes), and the
core moves a state only through :func:`advance`, so the tables are the only
place a transition can come from.

The tables follow §6.1-§6.3 word for word, with one naming note: the
``transfer.state`` values of the §4 data model (``none``, ``pending``,
``accepted``, ``rolled_back``, ``commit_reported``) and the §6.3 machine
(``LOCAL_QUEUED`` ... ``LOCAL_REMOVED``) describe one thing; the enum values
here are the §6.3 names, and :data:`TRANSFER_MODEL_VALUE` gives the §4 name
of each for anything that shows a record (``ampcap dump``, audits).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

__all__ = ["RecordState", "RecordEvent", "RecipientState", "RecipientEvent", "TransferState", "TransferEvent",
           "RECORD_TABLE", "RECIPIENT_TABLE", "TRANSFER_TABLE", "TRANSFER_MODEL_VALUE", "Refused", "advance",
           "TERMINAL_RECIPIENT", "LIVE_RECIPIENT"]


class Refused(Exception):
    """A ``(state, event)`` pair the table does not hold: a bug in the caller
    or a stale row, never something to act on."""


class RecordState(enum.Enum):
    NEW = "new"
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    DONE = "done"
    EXPIRED = "expired"
    REJECTED = "rejected"
    TERMINAL = "terminal"


class RecordEvent(enum.Enum):
    ACCEPTED = "accepted"  # ttl > 0, ingress checks passed
    REJECTED = "rejected"  # policy / validation refusal
    ATTEMPT_STARTED = "attempt-started"
    ATTEMPT_FAILED = "attempt-failed"
    ALL_TERMINAL = "all-terminal"
    EXPIRY_REACHED = "expiry-reached"
    FINALIZED = "finalized"


R, RE = RecordState, RecordEvent
RECORD_TABLE: Mapping[tuple[RecordState, RecordEvent], RecordState] = {
    (R.NEW, RE.ACCEPTED): R.QUEUED,
    (R.NEW, RE.REJECTED): R.REJECTED,
    (R.QUEUED, RE.ATTEMPT_STARTED): R.DISPATCHING,
    (R.QUEUED, RE.EXPIRY_REACHED): R.EXPIRED,
    # A commit can arrive while no attempt is running (a poll delivered it):
    # §6.1 draws DONE only from DISPATCHING, because a poll is an attempt; the
    # core records the poll as ATTEMPT_STARTED first, so this pair is not here.
    (R.DISPATCHING, RE.ATTEMPT_FAILED): R.QUEUED,
    (R.DISPATCHING, RE.ALL_TERMINAL): R.DONE,
    (R.DISPATCHING, RE.EXPIRY_REACHED): R.EXPIRED,
    (R.EXPIRED, RE.FINALIZED): R.DONE,
    (R.DONE, RE.FINALIZED): R.TERMINAL,
    (R.REJECTED, RE.FINALIZED): R.TERMINAL,
}


class RecipientState(enum.Enum):
    PENDING = "pending"
    INFLIGHT = "inflight"
    DELIVERED = "delivered"
    EXPIRED = "expired"
    FAILED = "failed"
    TERMINAL = "terminal"


class RecipientEvent(enum.Enum):
    ATTEMPT = "attempt"
    ATTEMPT_FAILED = "attempt-failed"
    RECIPIENT_ACK = "recipient-ack"  # a valid §5.5 ACK
    NON_RETRYABLE = "non-retryable"
    TTL_REACHED = "ttl-reached"
    FINALIZED = "finalized"


P, PE = RecipientState, RecipientEvent
RECIPIENT_TABLE: Mapping[tuple[RecipientState, RecipientEvent], RecipientState] = {
    (P.PENDING, PE.ATTEMPT): P.INFLIGHT,
    (P.PENDING, PE.NON_RETRYABLE): P.FAILED,
    (P.PENDING, PE.TTL_REACHED): P.EXPIRED,
    # A redelivery (a second poll, a push after a dropped link) while the
    # first is unanswered: still one attempt in flight.
    (P.INFLIGHT, PE.ATTEMPT): P.INFLIGHT,
    (P.INFLIGHT, PE.ATTEMPT_FAILED): P.PENDING,
    (P.INFLIGHT, PE.RECIPIENT_ACK): P.DELIVERED,
    (P.INFLIGHT, PE.NON_RETRYABLE): P.FAILED,
    (P.INFLIGHT, PE.TTL_REACHED): P.EXPIRED,
    (P.DELIVERED, PE.FINALIZED): P.TERMINAL,
    (P.EXPIRED, PE.FINALIZED): P.TERMINAL,
    (P.FAILED, PE.FINALIZED): P.TERMINAL,
}
TERMINAL_RECIPIENT = frozenset({P.DELIVERED, P.EXPIRED, P.FAILED})
LIVE_RECIPIENT = frozenset({P.PENDING, P.INFLIGHT})


class TransferState(enum.Enum):
    LOCAL_QUEUED = "local_queued"
    TRANSFER_PENDING = "transfer_pending"
    TRANSFER_ACCEPTED = "transfer_accepted"
    ROLLED_BACK = "rolled_back"
    DUAL_ACTIVE = "dual_active"
    COMMIT_REPORTED = "commit_reported"
    LOCAL_REMOVED = "local_removed"


class TransferEvent(enum.Enum):
    HANDOFF_STARTED = "handoff-started"
    VALID_RECEIPT = "valid-receipt"
    TIMEOUT_OR_INVALID = "timeout-or-invalid"  # timeout, refusal, or a receipt that does not verify
    SINGLE_CUSTODY = "single-custody"
    DUAL_CUSTODY = "dual-custody"
    VALID_COMMIT_RECEIPT = "valid-commit-receipt"
    AUDIT_PERSISTED = "audit-persisted"
    RESUME_LOCAL = "resume-local"
    LOCAL_EXPIRY = "local-expiry"


T, TE = TransferState, TransferEvent
TRANSFER_TABLE: Mapping[tuple[TransferState, TransferEvent], TransferState] = {
    (T.LOCAL_QUEUED, TE.HANDOFF_STARTED): T.TRANSFER_PENDING,
    (T.TRANSFER_PENDING, TE.VALID_RECEIPT): T.TRANSFER_ACCEPTED,
    (T.TRANSFER_PENDING, TE.TIMEOUT_OR_INVALID): T.ROLLED_BACK,
    (T.TRANSFER_ACCEPTED, TE.SINGLE_CUSTODY): T.LOCAL_REMOVED,
    (T.TRANSFER_ACCEPTED, TE.DUAL_CUSTODY): T.DUAL_ACTIVE,
    (T.DUAL_ACTIVE, TE.VALID_COMMIT_RECEIPT): T.COMMIT_REPORTED,
    (T.COMMIT_REPORTED, TE.AUDIT_PERSISTED): T.LOCAL_REMOVED,
    (T.ROLLED_BACK, TE.RESUME_LOCAL): T.LOCAL_QUEUED,
    (T.DUAL_ACTIVE, TE.LOCAL_EXPIRY): T.LOCAL_REMOVED,
}

TRANSFER_MODEL_VALUE: Mapping[TransferState, str] = {
    T.LOCAL_QUEUED: "none", T.TRANSFER_PENDING: "pending", T.TRANSFER_ACCEPTED: "accepted",
    T.ROLLED_BACK: "rolled_back", T.DUAL_ACTIVE: "accepted", T.COMMIT_REPORTED: "commit_reported",
    T.LOCAL_REMOVED: "accepted",
}

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


def advance(table: Mapping[tuple[S, E], S], state: S, event: E) -> S:
    """The state ``event`` moves ``state`` to; :class:`Refused` when the
    table has no such transition."""
    try:
        return table[(state, event)]
    except KeyError:
        raise Refused(f"{event.value} is not allowed in state {state.value}") from None
