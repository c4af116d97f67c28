"""The state store on both backends (R19, R25): the same components, the same
SQL, one schema history; claims with leases between two connections to one
store; the owner lock that keeps uncoordinated daemons apart. Every test
runs on SQLite and on a private PostgreSQL cluster (``store_target``,
tests/pg.py)."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from ampcap.errors import AmpError
from ampcap.peer.dedupe import InvokeKey, Terminal
from ampcap.peer.journal import JournalRecord, JournalState
from ampcap.store import StateStore, open_store
from ampcap.peer.journal import ClaimStatus
from ampcap.store.journal import StoreJournal
from ampcap.store.owner import StoreBusy
from ampcap.store.postgres import translate
from ampcap.store.sessions import SqliteSessions

T0 = 1_700_000_000_000
SRC = str(Path(__file__).parents[2] / "src")


def _running(n: int, *, fingerprint: bytes = b"f" * 32, expires_at: int = T0 + 60_000) -> JournalRecord:
    return JournalRecord(key=InvokeKey("did:key:zAlice", n.to_bytes(16, "big")), fingerprint=fingerprint,
                         capability_id="org.ampcap.demo.sleep:1.0.0", state=JournalState.RUNNING,
                         expires_at=expires_at, thread_id=b"t" * 16)


def _done(record: JournalRecord, wire: bytes = b"terminal bytes") -> JournalRecord:
    return msgspec.structs.replace(record, state=JournalState.DONE, terminal=Terminal(wire, T0 + 30_000),
                                   owner=None)


def test_portable_sql_is_translated_for_postgresql() -> None:
    assert translate("SELECT a FROM t WHERE k = ? AND n < ?") == "SELECT a FROM t WHERE k = %s AND n < %s"
    assert translate("CREATE TABLE IF NOT EXISTS t (k BLOB PRIMARY KEY, n INTEGER, s TEXT)") == \
        "CREATE TABLE IF NOT EXISTS t (k BYTEA PRIMARY KEY, n BIGINT, s TEXT)"
    # Outside DDL the words are left alone (a column may be named after a type).
    assert translate("SELECT integer_col FROM t") == "SELECT integer_col FROM t"
    with pytest.raises(ValueError):
        translate("SELECT 'a%' FROM t")


def test_schema_rows_and_a_failed_batch_on_both_backends(store_target: str) -> None:
    store = open_store(store_target)
    assert store.ensure_schema("demo", 1, ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB, n INTEGER)"]) == 0
    with store.transaction() as db:
        db.execute("INSERT INTO t (k, v, n) VALUES (?, ?, ?)", ("a", b"\x00\x01", 2 ** 62))
    assert [(k, bytes(v), n) for k, v, n in store.query("SELECT k, v, n FROM t")] == [("a", b"\x00\x01", 2 ** 62)]
    with pytest.raises(store.errors):
        with store.transaction() as db:
            db.execute("INSERT INTO t (k, v, n) VALUES (?, ?, ?)", ("b", b"", 1))
            db.execute("INSERT INTO t (k, v, n) VALUES (?, ?, ?)", ("b", b"", 1))
    assert store.query("SELECT count(*) FROM t") == [(1,)]
    store.close()
    # One schema history: reopening finds version 1, migrates to 2, refuses a newer file.
    again = open_store(store_target)
    assert again.ensure_schema("demo", 2, ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB, n INTEGER, "
                                           "m INTEGER NOT NULL DEFAULT 7)"],
                               {1: ["ALTER TABLE t ADD COLUMN m INTEGER NOT NULL DEFAULT 7"]}) == 1
    assert again.query("SELECT k, m FROM t") == [("a", 7)]
    with pytest.raises(AmpError) as err:
        again.ensure_schema("demo", 1, [])
    assert err.value.code == 5002 and "version 2" in err.value.message
    again.close()


def test_an_unreachable_postgresql_is_a_clear_5002() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(AmpError) as err:
        open_store("postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=2")
    assert err.value.code == 5002 and "secret" not in err.value.message and "***" in err.value.message


def test_journal_rows_find_running_and_prune(store_target: str) -> None:
    journal = StoreJournal(open_store(store_target))
    a, b, c = _running(1), _running(2), _running(3, expires_at=T0 + 10)
    journal.write([a, b, c])
    journal.write([_done(b)])  # the upsert replaces the RUNNING row
    assert journal.find(b.key, T0) == _done(b)
    assert journal.find(InvokeKey("did:key:zAlice", b"nope"), T0) is None
    assert {r.key for r in journal.load_running(T0)} == {a.key, c.key}
    assert journal.latest_expiry() == T0 + 60_000
    assert journal.find(c.key, T0 + 11) is None  # expired: gone for the executor
    assert journal.prune(T0 + 11) == 1 and journal.load_running(T0 + 11) == [a]


def test_sessions_round_trip_on_both_backends(store_target: str) -> None:
    from ampcap.session.record import Checkpoint, SessionRecord, SessionState, ThreadMode

    store = open_store(store_target)
    sessions = SqliteSessions(store)
    record = SessionRecord(session_id=bytes(16), owner="did:key:zA", participants=("did:key:zA", "did:key:zB"),
                           status=SessionState.SUSPENDED, created_at=1, expires_at=T0 + 9, last_activity_at=2,
                           thread_mode=ThreadMode.INDEPENDENT, suspended_at=3,
                           checkpoint=Checkpoint(last_seen_msg_id=bytes(16), last_activity_at=2),
                           pinned={"org.x.y": "org.x.y:1.0.0"}, last_terminal=bytes(16))
    sessions.write([record])
    sessions.write([dataclasses.replace(record, last_activity_at=5)])  # the upsert replaces it
    assert store.query("SELECT version FROM schema_versions WHERE component = 'sessions'") == [(2,)]
    store.close()
    assert SqliteSessions(open_store(store_target)).load(T0) == [dataclasses.replace(record, last_activity_at=5)]


def test_delegation_state_is_shared_between_connections(store_target: str) -> None:
    """A revocation one process records is seen by another (the revisions
    counter replaced SQLite's PRAGMA data_version); the earliest time wins."""
    from ampcap.deleg.credential import issue, revoke
    from ampcap.store.delegation import DelegationStore
    from ampcap.wire.identity import Identity

    alice = Identity.from_seed(bytes([7]) * 32)
    one, two = DelegationStore(open_store(store_target)), DelegationStore(open_store(store_target))
    credential = issue(alice, delegation_id="d1", delegate="did:key:zBob", issued_at=T0, expires_at=T0 + 60_000,
                       capabilities=["org.x.y"])
    assert one.record_credential(credential, T0) and not two.record_credential(credential, T0)
    assert [c.delegation_id for c in two.credentials_with_id("d1", 10)] == ["d1"]
    assert one.record_revocation(revoke(alice, delegation_id="d1", revoked_at=T0 + 500), T0 + 1)
    assert two.revoked_at(alice.did, "d1") is None
    two.refresh()
    assert two.revoked_at(alice.did, "d1") == T0 + 500
    # A later copy recorded by the other process cannot postpone it; an earlier one brings it forward.
    two.record_revocation(revoke(alice, delegation_id="d1", revoked_at=T0 + 900), T0 + 2)
    one.refresh()
    assert one.revoked_at(alice.did, "d1") == T0 + 500
    two.record_revocation(revoke(alice, delegation_id="d1", revoked_at=T0 + 100), T0 + 3)
    one.refresh()
    assert one.revoked_at(alice.did, "d1") == T0 + 100
    assert one.store.query("SELECT seq FROM deleg_revocation_log ORDER BY seq") == [(1,), (2,), (3,)]


def test_claims_between_two_connections(store_target: str) -> None:
    """R25: two processes' connections to one store; one claim wins, the other
    sees it held, then done with the same bytes; a lapsed lease is abandoned
    and exactly one taker wins it."""
    first, second = StoreJournal(open_store(store_target)), StoreJournal(open_store(store_target))
    a = _running(1)
    assert first.claim(a, "w1", T0 + 5_000, T0).status is ClaimStatus.CLAIMED
    assert first.claim(a, "w1", T0 + 5_000, T0).status is ClaimStatus.CLAIMED  # our own retry
    held = second.claim(a, "w2", T0 + 5_000, T0 + 1)
    assert held.status is ClaimStatus.HELD and held.record is not None and held.record.owner == "w1"
    other = msgspec.structs.replace(a, fingerprint=b"g" * 32)
    assert second.claim(other, "w2", T0 + 5_000, T0 + 1).status is ClaimStatus.CONFLICT
    assert second.wait_for([a.key], T0 + 2) == []
    with first.store.transaction() as db:
        assert first.complete_rows(db, [_done(a)], "w1") == []
    [done] = second.wait_for([a.key], T0 + 3)
    assert done.terminal == _done(a).terminal
    after = second.claim(a, "w2", T0 + 5_000, T0 + 4)
    assert after.status is ClaimStatus.DONE and after.record is not None and after.record.terminal == done.terminal

    # A lease renewed lives on; one left to lapse means its owner died.
    b, c = _running(2), _running(3)
    assert first.claim(b, "w1", T0 + 1_000, T0).status is ClaimStatus.CLAIMED
    assert first.claim(c, "w1", T0 + 1_000, T0).status is ClaimStatus.CLAIMED
    assert first.renew("w1", T0 + 3_000) == 2
    assert second.claim(b, "w2", T0 + 5_000, T0 + 2_000).status is ClaimStatus.HELD
    assert second.claim(b, "w2", T0 + 5_000, T0 + 3_001).status is ClaimStatus.ABANDONED
    # Two survivors race to take the idempotent one over: exactly one wins.
    third = StoreJournal(open_store(store_target))
    wins = [second.take_over(b.key, "w2", T0 + 9_000, T0 + 3_001), third.take_over(b.key, "w3", T0 + 9_000, T0 + 3_001)]
    assert sorted(wins) == [False, True]
    # A non-idempotent one is closed with its 5002 by one of them; the dead owner's late completion is refused.
    assert second.close_abandoned(_done(c, b"5002 bytes"), T0 + 3_001)
    assert not third.close_abandoned(_done(c, b"other 5002"), T0 + 3_001)
    with first.store.transaction() as db:
        assert first.complete_rows(db, [_done(c, b"late")], "w1") == [c.key]
    found = third.find(c.key, T0 + 3_002)
    assert found is not None and found.terminal is not None and found.terminal.wire == b"5002 bytes"


def test_a_completion_is_announced_on_postgresql(postgres_url: str) -> None:
    import psycopg

    journal = StoreJournal(open_store(postgres_url))
    a = _running(1)
    assert journal.claim(a, "w1", T0 + 5_000, T0).status is ClaimStatus.CLAIMED
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute("LISTEN ampcap_invoke_done")
        with journal.store.transaction() as db:
            journal.complete_rows(db, [_done(a)], "w1")
        [note] = list(listener.notifies(timeout=10, stop_after=1))
    assert note.channel == "ampcap_invoke_done"  # one per committed batch: waiters then read their rows


def test_two_uncoordinated_processes_are_refused_a_group_shares(store_target: str) -> None:
    one, two, three = (open_store(store_target) for _ in range(3))
    alone = one.take_ownership(None)
    with pytest.raises(StoreBusy) as busy:
        two.take_ownership(None)
    assert busy.value.code == 5002 and "does not coordinate" in busy.value.message
    with pytest.raises(StoreBusy):
        two.take_ownership("group token")
    alone.release()
    # A group's workers share it; another group, or a lone daemon, does not get in.
    member1 = two.take_ownership("group token")
    member2 = three.take_ownership("group token")
    with pytest.raises(StoreBusy):
        one.take_ownership(None)
    with pytest.raises(StoreBusy):
        one.take_ownership("another group")
    member1.release()
    with pytest.raises(StoreBusy):  # one member still lives
        one.take_ownership(None)
    member2.release()
    one.take_ownership(None).release()


def test_the_owner_lock_dies_with_its_process(store_target: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ampcap.store import open_store; "
                               "o = open_store(sys.argv[1]).take_ownership(None); print('held', flush=True); "
                               "time.sleep(600)", store_target],
        stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        store = open_store(store_target)
        with pytest.raises(StoreBusy):
            store.take_ownership(None)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        # The server notices a killed client's connection closing; SQLite's flock goes with the process.
        for _ in range(100):
            try:
                store.take_ownership(None).release()
                break
            except StoreBusy:
                import time
                time.sleep(0.05)
        else:
            pytest.fail("the dead process's owner lock was never released")
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_the_in_memory_store_is_sqlite_and_never_busy() -> None:
    store = StateStore.open(None)
    assert store.backend == "sqlite" and not store.durable
    store.take_ownership(None)
    store.take_ownership(None)


def test_a_postgresql_restart_fails_one_statement_then_the_store_reconnects(pg_cluster, postgres_url: str) -> None:
    from ampcap.errors import AmpError

    journal = StoreJournal(open_store(postgres_url))
    journal.write([_running(1)])
    pg_cluster.pause()
    try:
        with pytest.raises((*journal.store.errors, AmpError)):  # down: the statement fails
            journal.find(_running(1).key, T0)
        with pytest.raises((*journal.store.errors, AmpError)):
            journal.write([_done(_running(1))])
    finally:
        pg_cluster.resume()
    # Up again: the next statement finds a new connection: nothing was lost, writes go on.
    assert journal.find(_running(1).key, T0) == _running(1)
    journal.write([_done(_running(1))])
    assert journal.find(_running(1).key, T0) == _done(_running(1))
    # A restart while the store is idle costs nothing: a transaction's BEGIN
    # and a read find the broken connection and open a new one.
    pg_cluster.pause()
    pg_cluster.resume()
    journal.write([_done(_running(2))])
    pg_cluster.pause()
    pg_cluster.resume()
    assert journal.find(_running(2).key, T0) == _done(_running(2))
