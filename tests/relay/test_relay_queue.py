"""The durable queue component (store/relay_queue.py) against the ``store``
fixture (SQLite here; the PostgreSQL branch swaps the fixture), plus what
only a file shows: records survive a reopen."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import ampcap.store.relay_queue as module
from ampcap.relay.model import NewRecord, TransferInfo
from ampcap.relay.states import TransferState
from ampcap.store.database import StateStore
from ampcap.store.relay_queue import StoreRelayQueue

NOW = 1_800_000_000_000


def rec(n: int, recipients=("did:b",), *, sender="did:a", expires=NOW + 60_000) -> NewRecord:
    return NewRecord(msg_id=n.to_bytes(16, "big"), raw=b"raw-%d" % n, from_did=sender, recipients=tuple(recipients),
                     accepted_at=NOW, expires_at=expires)


def test_enqueue_dedupe_and_all_or_nothing_quota(store) -> None:
    q = StoreRelayQueue(store)
    first = q.enqueue(rec(1, ("did:b", "did:c")), quota=2)
    assert first.seq == 1 and first.queued == ("did:b", "did:c")
    again = q.enqueue(rec(1, ("did:b", "did:c", "did:d")), quota=2)
    assert again.duplicates == ("did:b", "did:c") and again.queued == ("did:d",) and again.seq == 2
    assert q.enqueue(rec(2), quota=2).seq == 3
    full = q.enqueue(rec(3, ("did:b", "did:e")), quota=2)
    assert full.seq is None and full.over_quota == ("did:b",) and full.queued == ()
    assert q.page("did:e", 0, 10, NOW) == []  # nothing written for the refused message
    assert [c.raw for c in q.page("did:b", 0, 10, NOW)] == [b"raw-1", b"raw-2"]


def test_claims_are_exclusive_until_the_lease_lapses(store) -> None:
    q = StoreRelayQueue(store)
    seq = q.enqueue(rec(1), quota=10).seq
    assert q.claim(seq, "did:b", "p1", NOW, NOW + 100, NOW + 1000) is not None
    assert q.claim(seq, "did:b", "p2", NOW + 50, NOW + 150, NOW + 1000) is None
    assert [c.seq for c in q.due("did:b", "p2", NOW + 2000, 10)] == [seq]  # p1's lease lapsed at NOW + 100
    assert q.renew("p1", NOW + 5000) == 1  # ... unless p1 lives and renews it
    assert q.due("did:b", "p2", NOW + 2000, 10) == []
    assert q.claim(seq, "did:b", "p2", NOW + 2000, NOW + 2100, NOW + 3000) is None
    assert not q.release(seq, "did:b", "p2", NOW, None)  # only the owner releases
    assert q.claim(seq, "did:b", "p2", NOW + 6000, NOW + 6100, NOW + 7000) is not None  # p1 died


def test_commit_is_per_recipient_and_finalizes_the_record(store) -> None:
    q = StoreRelayQueue(store)
    seq = q.enqueue(rec(1, ("did:b", "did:c")), quota=10).seq
    committed, finalized = q.commit((1).to_bytes(16, "big"), "did:b", ["did:a"], NOW)
    assert [c.recipient for c in committed] == ["did:b"] and finalized == []
    assert q.commit((1).to_bytes(16, "big"), "did:b", ["did:a"], NOW) == ([], [])  # once
    assert q.commit((1).to_bytes(16, "big"), "did:c", ["did:x"], NOW) == ([], [])  # wrong original sender
    committed, finalized = q.commit((1).to_bytes(16, "big"), "did:c", ["did:a"], NOW)
    assert finalized == [seq] and q.get(seq, "did:b") is None


def test_expiry_removes_records_and_dedupe_keys(store) -> None:
    q = StoreRelayQueue(store)
    q.enqueue(rec(1, expires=NOW + 10), quota=10)
    q.enqueue(rec(2, expires=NOW + 1000), quota=10)
    assert q.next_expiry() == NOW + 10
    expired, finalized = q.expire(NOW + 11, 100)
    assert [e.msg_id for e in expired] == [(1).to_bytes(16, "big")] and finalized == [1]
    assert q.prior_receipt("did:a", (1).to_bytes(16, "big"), "did:b", NOW + 11) is None
    assert q.enqueue(rec(1, expires=NOW + 5000), quota=10).queued == ("did:b",)  # the key is free again


def test_transfer_columns_round_trip(store) -> None:
    q = StoreRelayQueue(store)
    seq = q.enqueue(rec(1), quota=10).seq
    info = TransferInfo(mode="dual", downstream="did:r", state=TransferState.TRANSFER_PENDING, attempts=1,
                        deadline=NOW + 5, receipt=b"r")
    q.set_transfer(seq, "did:b", info)
    assert q.get(seq, "did:b").transfer == info
    assert [c.seq for c in q.transfers_overdue(NOW + 6, 10)] == [seq]
    assert q.page("did:b", 0, 10, NOW) == []  # pending custody: not delivered locally
    assert q.find_transfer((1).to_bytes(16, "big"), "did:a", "did:b", "did:r").seq == seq
    assert q.find_transfer((1).to_bytes(16, "big"), "did:a", "did:b", "did:other") is None


def test_cursor_pass_is_kept(store) -> None:
    q = StoreRelayQueue(store)
    assert q.cursor_pass("did:b", new=True) == 1
    assert q.cursor_pass("did:b", new=False) == 1
    assert q.cursor_pass("did:b", new=True) == 2
    assert q.cursor_pass("did:c", new=False) == 0


def test_records_survive_a_reopen(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path)
    q = StoreRelayQueue(store)
    q.register("did:b", NOW)
    seq = q.enqueue(rec(7), quota=10).seq
    store.close()
    again = StoreRelayQueue(StateStore.open(tmp_path))
    try:
        assert again.is_registered("did:b")
        [copy] = again.page("did:b", 0, 10, NOW)
        assert (copy.seq, copy.raw) == (seq, b"raw-7")
        assert again.enqueue(rec(8), quota=10).seq == seq + 1  # the counter survived too
    finally:
        again.store.close()


def test_the_sql_is_portable() -> None:
    """Store contract rules 1-5: nothing SQLite-only in the component."""
    text = Path(module.__file__).read_text().split('"""', 2)[2]  # past the module docstring
    sql = " ".join(re.findall(r'"([^"]*)"', text)).upper()
    for banned in ("INSERT OR", "REPLACE INTO", "ROWID", "AUTOINCREMENT", "PRAGMA", "%S", "GLOB"):
        assert banned not in sql, banned
    types = set(re.findall(r"\b(TEXT|BLOB|INTEGER|REAL|NUMERIC|BOOLEAN|VARCHAR|TIMESTAMP)\b", sql))
    assert types <= {"TEXT", "BLOB", "INTEGER"}


def test_a_poll_page_is_read_by_index_however_long_the_queue(store) -> None:
    if not isinstance(getattr(store, "_db", None), sqlite3.Connection):
        return  # the plan below is SQLite's; the PostgreSQL branch checks its own
    q = StoreRelayQueue(store)
    plan = " ".join(str(row) for row in store.query(
        "EXPLAIN QUERY PLAN SELECT e.seq FROM relay_entry e JOIN relay_record r ON r.seq = e.seq WHERE "
        "e.recipient = ? AND e.seq > ? AND e.state IN ('pending', 'inflight') ORDER BY e.seq LIMIT ?",
        ("did:b", 0, 50)))
    assert "relay_entry_recipient" in plan and "SCAN e" not in plan
    assert q.page("did:b", 0, 10, NOW) == []
