"""A paid call's spend and the invoke journal commit together (store level,
on SQLite and PostgreSQL): every path by which the journal closes an invoke
as cut short gives back the payment that invoke spent, in the same
transaction; a completed or still-running invoke keeps it.
tests/pay/test_paid_restart.py does the same end to end with ``kill -9``."""

from __future__ import annotations

import pytest

from ampcap.peer.dedupe import InvokeKey, Terminal
from ampcap.peer.journal import ClaimStatus, JournalRecord, JournalState
from ampcap.store.database import StateStore
from ampcap.store.journal import StoreJournal, on_interrupted
from ampcap.store.payments import PaymentStore

CALLER = "did:example:caller"
CAP = "org.test.paid:1.0.0"
NOW = 1_800_000_000_000


def _running(n: int) -> JournalRecord:
    return JournalRecord(key=InvokeKey(CALLER, bytes([n]) * 16), fingerprint=b"f%d" % n, capability_id=CAP,
                         state=JournalState.RUNNING, expires_at=NOW + 600_000)


def _closed(record: JournalRecord) -> JournalRecord:
    return JournalRecord(key=record.key, fingerprint=record.fingerprint, capability_id=CAP, state=JournalState.DONE,
                         expires_at=record.expires_at, terminal=Terminal(b"5002 bytes", record.expires_at))


def _spend(payments: PaymentStore, n: int, record: JournalRecord) -> bytes:
    payment_id = bytes([0xA0 + n]) * 16
    assert payments.consume(payment_id, CAP, CALLER, NOW, record.key.msg_id)
    return payment_id


def test_every_closure_of_an_interrupted_invoke_gives_its_payment_back(store: StateStore) -> None:
    payments = PaymentStore(store)
    journal = StoreJournal(store)
    restarted, abandoned, overwritten, finished, alive = (_running(n) for n in range(1, 6))
    paid = {r.key: _spend(payments, n, r) for n, r in
            enumerate((restarted, abandoned, overwritten, finished, alive), start=1)}
    # Two workers' claims: worker "w1" dies (its lease ran out at NOW), "w2" lives on.
    for record in (abandoned, overwritten):
        assert journal.claim(record, "w1", NOW - 1, NOW - 10).status is ClaimStatus.CLAIMED
    assert journal.claim(alive, "w2", NOW + 60_000, NOW).status is ClaimStatus.CLAIMED
    journal.write([restarted])
    assert journal.claim(finished, "w2", NOW + 60_000, NOW).status is ClaimStatus.CLAIMED

    # A restart closes its interrupted invoke with 5002: the payment is free again.
    journal.close_interrupted([_closed(restarted)])
    assert payments.consumed(paid[restarted.key]) is None
    # Another worker closes the dead worker's claim: the same.
    assert journal.close_abandoned(_closed(abandoned), NOW)
    assert payments.consumed(paid[abandoned.key]) is None
    # Another worker's answer written over a lapsed claim: the same.
    with store.transaction() as db:
        journal.add_rows(db, [_closed(overwritten)], NOW)
    assert payments.consumed(paid[overwritten.key]) is None
    # A completed invoke keeps what it spent; so does one whose owner lives
    # (closing it is refused: the lease holds).
    with store.transaction() as db:
        assert journal.complete_rows(db, [_closed(finished)], "w2") == []
    assert not journal.close_abandoned(_closed(alive), NOW)
    assert payments.consumed(paid[finished.key]) == CAP and payments.consumed(paid[alive.key]) == CAP
    assert payments.released == 3
    # A freed payment buys one new call (another invoke); a second is refused.
    assert payments.consume(paid[restarted.key], CAP, CALLER, NOW, b"n" * 16)
    assert not payments.consume(paid[restarted.key], CAP, CALLER, NOW, b"m" * 16)


def test_a_failed_closure_gives_nothing_back(store: StateStore) -> None:
    """The hook runs inside the journal's transaction: when that rolls back
    (here a later hook fails after the payment's ran), so does the release."""
    payments = PaymentStore(store)
    journal = StoreJournal(store)
    record = _running(9)
    payment_id = _spend(payments, 9, record)
    journal.write([record])

    def fails(db: object, keys: object) -> None:
        raise RuntimeError("the store went away")

    on_interrupted(store, "fails", fails)
    with pytest.raises(RuntimeError):
        journal.close_interrupted([_closed(record)])
    assert payments.consumed(payment_id) == CAP
    found = journal.find(record.key, NOW)
    assert found is not None and found.state is JournalState.RUNNING
