"""The invoke journal (R19): the executor's Persist actions, its table in
the state database, and what a restart restores (tests/store/
test_journal_restart.py does it with a real daemon and kill -9)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
from exec_helpers import ALICE, INVOKE, PROVIDER, RESULT, SEAL, T0, entropy, manifest, message, DemoRegistry, DemoResolver, sends  # noqa: E402

from ampcap.caps.params import ParamsValidator  # noqa: E402
from ampcap.peer.executor import INTERRUPTED, Execute, Executor  # noqa: E402
from ampcap.peer.journal import JournalRecord, JournalState, Persist  # noqa: E402
from ampcap.peer.sealing import Sealer  # noqa: E402
from ampcap.wire.envelope import decode_envelope  # noqa: E402
from ampcap.wire.identity import DidKeyResolver  # noqa: E402
from ampcap.store.database import StateStore  # noqa: E402
from ampcap.store.journal import SqliteJournal  # noqa: E402

ECHO = {"id": "org.ampcap.demo.echo:1.0.0", "params": {"message": "hi"}}
SLEEP = {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 10}}


def _executor(journal: bool = True) -> Executor:
    m = manifest()
    resolver = DemoResolver(m)
    return Executor(registry=DemoRegistry(resolver), resolver=resolver, params=ParamsValidator(m.schema_store()),
                    seal=SEAL, journal=journal)


def _run(ex: Executor, body: dict, now: int = T0, inbound=None) -> tuple[list, list]:
    inbound = inbound or message(ALICE, INVOKE, body, now)
    started = ex.handle(inbound, "c1", now)
    job = next(a.job for a in started if isinstance(a, Execute))
    return started, ex.complete(job.key, result={"message": "hi", "version": "1.0.0"}, now_ms=now + 5)


def test_persist_comes_before_execute_and_before_the_terminal_send() -> None:
    started, finished = _run(_executor(), ECHO)
    assert [type(a).__name__ for a in started] == ["Persist", "Execute"]
    assert started[0].records[0].state is JournalState.RUNNING
    assert type(finished[0]) is Persist and finished[0].records[0].state is JournalState.DONE
    terminal = finished[0].records[0].terminal
    # The journal keeps the very bytes sent (sealed once by the executor, R8).
    sent = sends(finished, RESULT)[0].out
    assert sent.wire == terminal.wire and terminal.expires_at == sent.ts_ms + sent.ttl_ms
    env = decode_envelope(terminal.wire)
    assert env.ts == T0 + 5 and env.sender == PROVIDER.did and env.reply_to == started[1].job.key.msg_id


def test_without_a_journal_no_persist_and_a_retry_gets_the_same_bytes() -> None:
    ex = _executor(journal=False)
    inbound = message(ALICE, INVOKE, ECHO, T0)
    started = ex.handle(inbound, "c1", T0)
    assert not any(isinstance(a, Persist) for a in started)
    job = next(a.job for a in started if isinstance(a, Execute))
    first = sends(ex.complete(job.key, result={"m": 1}, now_ms=T0 + 1), RESULT)[0].out
    again = sends(ex.handle(inbound, "c2", T0 + 50), RESULT)[0].out
    # R8: the same message, byte for byte.
    assert first.wire is not None and again.wire == first.wire


def test_an_expired_terminal_is_4001_not_re_signed() -> None:
    ex = Executor(registry=None, resolver=DemoResolver(manifest()), params=ParamsValidator(manifest().schema_store()),
                  seal=Sealer(PROVIDER, entropy, DidKeyResolver(), default_ttl_ms=10))
    inbound = message(ALICE, INVOKE, ECHO, T0)
    job = next(a.job for a in ex.handle(inbound, "c1", T0) if isinstance(a, Execute))
    ex.complete(job.key, result=None, now_ms=T0)
    late = sends(ex.handle(inbound, "c1", T0 + 1_000))
    assert late[0].out.typ != RESULT and late[0].out.body["code"] == 4001


def test_sqlite_round_trip_and_prune(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path)
    journal = SqliteJournal(store)
    _, finished = _run(_executor(), ECHO)
    started, _ = _run(_executor(), SLEEP)
    journal.write([*started[0].records, *finished[0].records])
    store.close()
    again = SqliteJournal(StateStore.open(tmp_path)).load(T0)
    by_state = {r.state: r for r in again}
    assert by_state[JournalState.DONE] == finished[0].records[0]
    assert by_state[JournalState.RUNNING] == started[0].records[0]
    assert SqliteJournal(StateStore.open(tmp_path)).prune(T0 + 10**9) == 2


def test_preload_restores_done_and_closes_interrupted_with_5002() -> None:
    echo, sleep = message(ALICE, INVOKE, ECHO, T0), message(ALICE, INVOKE, SLEEP, T0)
    _, finished = _run(_executor(), ECHO, inbound=echo)
    started, _ = _run(_executor(), SLEEP, inbound=sleep)
    done, running = finished[0].records[0], started[0].records[0]
    fresh = _executor()
    closed, notes = fresh.preload([done, running], T0 + 100, idempotent=lambda cid: False)
    assert len(closed) == 1 and notes == [] and closed[0].state is JournalState.DONE
    error = decode_envelope(closed[0].terminal.wire).body["error"]
    assert (error["code"], error["message"]) == (5002, INTERRUPTED)
    [retry] = sends(fresh.handle(echo, "c9", T0 + 200), RESULT)
    assert retry.out.wire == done.terminal.wire  # the bytes first sent, across the restart
    [cut] = sends(fresh.handle(sleep, "c9", T0 + 200), RESULT)
    assert cut.out.wire == closed[0].terminal.wire
    # An idempotent capability's interrupted invoke is not answered from the journal: it runs again.
    other = _executor()
    assert other.preload([running], T0 + 100, idempotent=lambda cid: True) == ([], [])
    assert any(isinstance(a, Execute) for a in other.handle(sleep, "c9", T0 + 200))


def test_a_record_keeps_its_shape() -> None:
    import pytest

    from ampcap.peer.dedupe import InvokeKey

    with pytest.raises(ValueError):
        JournalRecord(key=InvokeKey("did:x", bytes(16)), fingerprint=b"", capability_id="a:1.0.0",
                      state=JournalState.DONE, expires_at=0)


# ------------------------------------------- the 5002 is the reply the job would have had

THREAD = bytes(range(16))


def _encrypted(body: dict, now: int = T0, thread_id: bytes | None = THREAD):
    """A CAP_INVOKE from ALICE authcrypted to the provider, through a real receive pipeline."""
    from ampcap.wire.envelope import seal
    from ampcap.wire.identity import x25519_from_did_key
    from ampcap.wire.receive import ReceivePipeline

    _, wire = seal(ALICE, typ=INVOKE, to=PROVIDER.did, body=body, now_ms=now, entropy=entropy, ttl=600_000,
                   thread_id=thread_id, encrypt_to=x25519_from_did_key(PROVIDER.did))
    inbound = ReceivePipeline(DidKeyResolver(), decrypt_with=[PROVIDER]).check(wire, now)
    assert inbound.decrypted
    return inbound


def _opened(wire: bytes, now: int):
    """ALICE's view of a reply: decrypted (when encrypted) and its signature checked."""
    from ampcap.wire.receive import ReceivePipeline

    return ReceivePipeline(DidKeyResolver(), decrypt_with=[ALICE], recipient=ALICE.did).check(wire, now)


def _interrupted(inbound) -> JournalRecord:
    """The RUNNING record the executor journals for ``inbound``, as it reads back from the database."""
    started = _executor().handle(inbound, "c1", T0)
    [record] = started[0].records
    assert record.state is JournalState.RUNNING
    journal = SqliteJournal(StateStore.open(None))
    journal.write([record])
    [back] = journal.load(T0)
    assert back == record
    return back


def test_an_authcrypted_invoke_interrupted_by_a_restart_gets_an_encrypted_5002_on_its_thread() -> None:
    inbound = _encrypted(SLEEP)
    running = _interrupted(inbound)
    assert running.encrypted and running.thread_id == THREAD
    fresh = _executor()
    [closed], notes = fresh.preload([running], T0 + 100, idempotent=lambda cid: False)
    assert notes == [] and closed.encrypted and closed.thread_id == THREAD
    env = decode_envelope(closed.terminal.wire)
    # The body is not readable on the wire: only ALICE's key opens it.
    assert env.enc is not None and env.body is None
    assert env.thread_id == THREAD and env.reply_to == inbound.envelope.id and env.to == ALICE.did
    seen = _opened(closed.terminal.wire, T0 + 150)
    assert seen.decrypted and seen.body["error"]["code"] == 5002 and seen.body["error"]["message"] == INTERRUPTED
    # The unchanged retry gets exactly those bytes, however often it comes (R8).
    for n in range(2):
        [retry] = sends(fresh.handle(inbound, f"c{n}", T0 + 200), RESULT)
        assert retry.out.wire == closed.terminal.wire and retry.out.encrypt
    # A second restart restores the closed record: the same bytes again, nothing re-sealed.
    later = _executor()
    assert later.preload([closed], T0 + 300, idempotent=lambda cid: False) == ([], [])
    [retry] = sends(later.handle(inbound, "c9", T0 + 400), RESULT)
    assert retry.out.wire == closed.terminal.wire


def test_a_plain_invoke_interrupted_by_a_restart_gets_a_plain_5002_with_its_thread_id() -> None:
    inbound = message(ALICE, INVOKE, SLEEP, T0, thread_id=THREAD)
    running = _interrupted(inbound)
    assert not running.encrypted and running.thread_id == THREAD
    [closed], _ = _executor().preload([running], T0 + 100, idempotent=lambda cid: False)
    env = decode_envelope(closed.terminal.wire)
    assert env.enc is None and env.thread_id == THREAD and env.body["error"]["code"] == 5002
    assert not _opened(closed.terminal.wire, T0 + 150).decrypted
    # No thread: none on the 5002 either, as on any reply.
    [closed], _ = _executor().preload([_interrupted(message(ALICE, INVOKE, SLEEP, T0))], T0 + 100,
                                      idempotent=lambda cid: False)
    assert decode_envelope(closed.terminal.wire).thread_id is None


def test_the_5002_is_the_reply_a_completed_job_would_have_had() -> None:
    """Same envelope shape as a normal terminal reply to that invoke: only the body differs."""
    inbound = _encrypted(SLEEP)
    ex = _executor()
    started = ex.handle(inbound, "c1", T0)
    job = next(a.job for a in started if isinstance(a, Execute))
    [normal] = sends(ex.complete(job.key, result={"slept_ms": 10}, now_ms=T0 + 5), RESULT)
    [closed], _ = _executor().preload([started[0].records[0]], T0 + 5, idempotent=lambda cid: False)
    a, b = decode_envelope(normal.out.wire), decode_envelope(closed.terminal.wire)
    assert (a.typ, a.to, a.reply_to, a.thread_id, a.enc is not None) == (b.typ, b.to, b.reply_to, b.thread_id, True)


def test_a_caller_key_gone_at_restart_still_closes_the_invoke_signed_and_says_so() -> None:
    """The caller's key agreement key no longer resolves (a keyring edited
    between the two lives): the invoke must still get its one 5002 and
    never run again; it goes out unencrypted, with a warning."""
    import logging

    from ampcap.errors import AmpError

    class Forgetful(DidKeyResolver):
        def x25519_for(self, did: str) -> bytes:
            raise AmpError(3001, "no key agreement key for this DID")

    running = _interrupted(_encrypted(SLEEP))
    m = manifest()
    resolver = DemoResolver(m)
    ex = Executor(registry=DemoRegistry(resolver), resolver=resolver, params=ParamsValidator(m.schema_store()),
                  seal=Sealer(PROVIDER, entropy, Forgetful()), journal=True)
    [closed], [note] = ex.preload([running], T0 + 100, idempotent=lambda cid: False)
    env = decode_envelope(closed.terminal.wire)
    assert env.enc is None and env.body["error"]["code"] == 5002 and env.thread_id == THREAD
    assert note.level == logging.WARNING and "unencrypted" in note.message and note.topic == "journal"


def test_a_version_1_database_opens_migrated_and_its_records_restore(tmp_path: Path) -> None:
    """A state database written by the previous ampcap (journal tables version
    1, without ``encrypted`` / ``thread_id``) opens: its rows read as plain,
    thread-less invokes (how version 1 answered them), and new rows keep both."""
    import sqlite3

    # The version-1 file, as that ampcap's SqliteJournal made it.
    db = sqlite3.connect(tmp_path / "state.sqlite3")
    db.executescript("""
        PRAGMA journal_mode=WAL;
        CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL);
        CREATE TABLE invoke_journal (
            sender TEXT NOT NULL, msg_id BLOB NOT NULL, fingerprint BLOB NOT NULL, capability TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'done')), expires_at INTEGER NOT NULL,
            wire BLOB, wire_expires_at INTEGER, PRIMARY KEY (sender, msg_id)) WITHOUT ROWID;
        CREATE INDEX invoke_journal_expiry ON invoke_journal (expires_at);
        INSERT INTO schema_versions VALUES ('journal', 1);
    """)
    echo, sleep = message(ALICE, INVOKE, ECHO, T0), message(ALICE, INVOKE, SLEEP, T0)
    _, finished = _run(_executor(), ECHO, inbound=echo)
    started, _ = _run(_executor(), SLEEP, inbound=sleep)
    done, running = finished[0].records[0], started[0].records[0]
    for r in (done, running):
        db.execute("INSERT INTO invoke_journal VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (r.key.sender, r.key.msg_id, r.fingerprint, r.capability_id, r.state.value, r.expires_at,
                    r.terminal.wire if r.terminal else None, r.terminal.expires_at if r.terminal else None))
    db.commit()
    db.close()

    store = StateStore.open(tmp_path)
    journal = SqliteJournal(store)
    assert store.query("SELECT version FROM schema_versions WHERE component = 'journal'") == [(4,)]
    # Version 3 rebuilt the table in portable SQL (no WITHOUT ROWID), rows kept.
    [(sql,)] = store.query("SELECT sql FROM sqlite_master WHERE name = 'invoke_journal'")
    assert "WITHOUT ROWID" not in sql and "lease_until" in sql and "session" in sql
    loaded = {r.state: r for r in journal.load(T0)}
    assert loaded[JournalState.DONE] == done and loaded[JournalState.RUNNING] == running
    assert not loaded[JournalState.RUNNING].encrypted and loaded[JournalState.RUNNING].thread_id is None
    fresh = _executor()
    [closed], _ = fresh.preload(list(loaded.values()), T0 + 100, idempotent=lambda cid: False)
    journal.write([closed])
    [retry] = sends(fresh.handle(echo, "c9", T0 + 200), RESULT)
    assert retry.out.wire == done.terminal.wire
    [cut] = sends(fresh.handle(sleep, "c9", T0 + 200), RESULT)
    assert cut.out.wire == closed.terminal.wire and decode_envelope(cut.out.wire).body["error"]["code"] == 5002
    # New rows carry the new columns.
    new = _interrupted(_encrypted(SLEEP, T0 + 1))
    journal.write([new])
    store.close()
    again = SqliteJournal(StateStore.open(tmp_path)).load(T0)
    assert new in again and closed in again and len(again) == 3


def test_a_session_scoped_invoke_interrupted_by_a_restart_gets_its_session_back() -> None:
    """The journal keeps the invoke's body.session (version 4): the 5002 it
    seals after a restart carries it, as every reply to that invoke does."""
    context = {"session_id": bytes(range(16)), "session_scope": True}
    running = _interrupted(message(ALICE, INVOKE, {**SLEEP, "session": context}, T0))
    assert running.session == context
    [closed], _ = _executor().preload([running], T0 + 100, idempotent=lambda cid: False)
    body = decode_envelope(closed.terminal.wire).body
    assert body["error"]["code"] == 5002 and body["session"] == context
    plain = _interrupted(message(ALICE, INVOKE, SLEEP, T0))
    [closed], _ = _executor().preload([plain], T0 + 100, idempotent=lambda cid: False)
    assert plain.session is None and "session" not in decode_envelope(closed.terminal.wire).body
