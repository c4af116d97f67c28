"""The §6 state machines are tables: what they allow, and that every other
(state, event) pair is refused."""

from __future__ import annotations

import itertools

import pytest

from ampcap.relay.states import (RECIPIENT_TABLE, RECORD_TABLE, TRANSFER_TABLE, RecipientEvent, RecipientState,
                                 RecordEvent, RecordState, Refused, TransferEvent, TransferState, advance)

MACHINES = [(RECORD_TABLE, RecordState, RecordEvent), (RECIPIENT_TABLE, RecipientState, RecipientEvent),
            (TRANSFER_TABLE, TransferState, TransferEvent)]


@pytest.mark.parametrize(("table", "states", "events"), MACHINES)
def test_every_pair_outside_the_table_is_refused(table, states, events) -> None:
    for state, event in itertools.product(states, events):
        if (state, event) in table:
            assert advance(table, state, event) is table[(state, event)]
        else:
            with pytest.raises(Refused):
                advance(table, state, event)


def test_the_rfc_paths() -> None:
    # §6.1: NEW -> QUEUED -> DISPATCHING -> DONE -> TERMINAL; expiry path.
    s = RecordState.NEW
    for event in (RecordEvent.ACCEPTED, RecordEvent.ATTEMPT_STARTED, RecordEvent.ALL_TERMINAL, RecordEvent.FINALIZED):
        s = advance(RECORD_TABLE, s, event)
    assert s is RecordState.TERMINAL
    assert advance(RECORD_TABLE, RecordState.EXPIRED, RecordEvent.FINALIZED) is RecordState.DONE
    # §6.2: only an ACK makes DELIVERED, and only from INFLIGHT.
    assert advance(RECIPIENT_TABLE, RecipientState.INFLIGHT, RecipientEvent.RECIPIENT_ACK) is RecipientState.DELIVERED
    with pytest.raises(Refused):
        advance(RECIPIENT_TABLE, RecipientState.DELIVERED, RecipientEvent.ATTEMPT)
    # §6.3: custody moves only through a valid receipt; rollback returns to local.
    t = advance(TRANSFER_TABLE, TransferState.LOCAL_QUEUED, TransferEvent.HANDOFF_STARTED)
    assert advance(TRANSFER_TABLE, t, TransferEvent.TIMEOUT_OR_INVALID) is TransferState.ROLLED_BACK
    assert advance(TRANSFER_TABLE, TransferState.ROLLED_BACK, TransferEvent.RESUME_LOCAL) is TransferState.LOCAL_QUEUED
    with pytest.raises(Refused):
        advance(TRANSFER_TABLE, TransferState.LOCAL_QUEUED, TransferEvent.VALID_RECEIPT)
    with pytest.raises(Refused):  # A.14: no commit report without dual custody
        advance(TRANSFER_TABLE, TransferState.TRANSFER_ACCEPTED, TransferEvent.VALID_COMMIT_RECEIPT)
