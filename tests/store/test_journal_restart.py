"""Exactly once across ``kill -9`` (ruling R19): ``serve --state-dir`` keeps
the invoke journal, a completed invoke retried after the restart gets the
very bytes first sent and does not run again, an interrupted one gets 5002
(or runs again when its capability is ``idempotent = true``)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

from ampcap.interop.probe import Probe, ProbeSettings  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

RESULT = frozenset({int(MessageType.CAP_RESULT)})
INTERIM = frozenset({int(MessageType.PROGRESS), int(MessageType.PROCESSING), int(MessageType.ACK)})
SETTINGS = ProbeSettings(timeout_s=10.0, settle_s=0.2)


def _manifest(tmp: Path) -> Path:
    path = tmp / "slow.toml"
    path.write_text("""
[[capability]]
name = "org.test.slow_idempotent"
version = "1.0.0"
idempotent = true
input_schema = { type = "object" }
output_schema = { type = "object" }
binding = { python = "ampcap.caps.demo:sleep" }
""")
    return path


async def _probe(url: str, ident: Identity) -> Probe:
    probe = await Probe.open(parse_url(url), SETTINGS, identity=ident)
    await probe.open_session()
    return probe


async def _exchange(url: str, ident: Identity, wire: bytes, request: Any, *, wait: bool = True) -> list[Any]:
    probe = await _probe(url, ident)
    try:
        await probe.send_bytes(probe.frame(wire))
        if not wait:
            await trio.sleep(0.3)  # let it arrive and start
            return []
        ex = await probe.collect(request, RESULT, interim_types=INTERIM)
        return ex.terminals
    finally:
        await probe.aclose()


def _kill(proc: Any) -> None:
    proc.proc.send_signal(signal.SIGKILL)
    proc.proc.wait(10)


@pytest.mark.trio
async def test_after_kill_9_a_completed_invoke_is_the_same_bytes_and_a_running_one_5002(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    args = ("--state-dir", str(state), "--manifest", str(_manifest(tmp_path)))
    with serve_process(tmp_path, *args) as first:
        probe = await _probe(first.url, ident)
        peer = probe.peer_did
        echo_env, echo_wire = probe.seal(MessageType.CAP_INVOKE, {"id": "org.ampcap.demo.echo:1.0.0",
                                                                  "params": {"message": "once"}}, to=peer)
        slow_env, slow_wire = probe.seal(MessageType.CAP_INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0",
                                                                  "params": {"ms": 60_000}}, to=peer)
        idem_env, idem_wire = probe.seal(MessageType.CAP_INVOKE, {"id": "org.test.slow_idempotent:1.0.0",
                                                                  "params": {"ms": 60_000}}, to=peer)
        await probe.aclose()
        before = await _exchange(first.url, ident, echo_wire, echo_env)
        assert len(before) == 1 and before[0].envelope.body["status"] == "success"
        await _exchange(first.url, ident, slow_wire, slow_env, wait=False)
        await _exchange(first.url, ident, idem_wire, idem_env, wait=False)
        _kill(first)
    with serve_process(tmp_path, *args) as second:
        assert second.did == peer
        after = await _exchange(second.url, ident, echo_wire, echo_env)
        assert [t.raw for t in after] == [before[0].raw]  # the same message: id, ts, signature
        interrupted = await _exchange(second.url, ident, slow_wire, slow_env)
        assert len(interrupted) == 1
        body = interrupted[0].envelope.body
        assert body["status"] == "error" and body["error"]["code"] == 5002
        assert "interrupted by a restart" in body["error"]["message"]
        again = await _exchange(second.url, ident, slow_wire, slow_env)
        assert [t.raw for t in again] == [interrupted[0].raw]  # and it stays that answer
        _kill(second)
    with serve_process(tmp_path, *args) as third:
        # The 5002 was journaled too: a third life gives the same bytes.
        assert [t.raw for t in await _exchange(third.url, ident, slow_wire, slow_env)] == [interrupted[0].raw]
        assert [t.raw for t in await _exchange(third.url, ident, echo_wire, echo_env)] == [before[0].raw]


@pytest.mark.trio
async def test_an_idempotent_capability_runs_again_after_the_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    args = ("--state-dir", str(state), "--manifest", str(_manifest(tmp_path)))
    with serve_process(tmp_path, *args) as first:
        probe = await _probe(first.url, ident)
        env, wire = probe.seal(MessageType.CAP_INVOKE, {"id": "org.test.slow_idempotent:1.0.0",
                                                        "params": {"ms": 5_000}}, to=probe.peer_did)
        await probe.aclose()
        await _exchange(first.url, ident, wire, env, wait=False)
        _kill(first)
    with serve_process(tmp_path, *args) as second:
        probe = await _probe(second.url, ident)
        try:
            await probe.send_bytes(probe.frame(wire))  # the very same invoke: it runs again
            ex = await probe.collect(env, RESULT, interim_types=INTERIM, timeout_s=15)
        finally:
            await probe.aclose()
        assert len(ex.terminals) == 1
        assert ex.terminals[0].envelope.body == {"status": "success", "result": {"slept_ms": 5_000}}


@pytest.mark.trio
async def test_a_retry_past_the_cache_and_a_restart_is_answered_from_the_store(tmp_path: Path) -> None:
    """The store is the record: with memory holding 4 finished invokes, the
    first of 12 is retried after the other 11, then after kill -9: the same
    bytes both times, read back from the journal (not 4001 "can no longer tell")."""
    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    args = ("--state-dir", str(state), "--invoke-cache", "4")
    with serve_process(tmp_path, *args) as first:
        probe = await _probe(first.url, ident)
        try:
            sealed = [probe.seal(MessageType.CAP_INVOKE, {"id": "org.ampcap.demo.echo:1.0.0",
                                                          "params": {"message": f"n{n}"}}, to=probe.peer_did)
                      for n in range(12)]
            terminals = []
            for env, wire in sealed:
                await probe.send_bytes(probe.frame(wire))
                terminals.append((await probe.collect(env, RESULT, interim_types=INTERIM)).terminals)
        finally:
            await probe.aclose()
        assert all(len(t) == 1 and t[0].envelope.body["status"] == "success" for t in terminals)
        env, wire = sealed[0]
        again = await _exchange(first.url, ident, wire, env)
        assert [t.raw for t in again] == [terminals[0][0].raw]
        _kill(first)
    with serve_process(tmp_path, *args) as second:
        for n in (0, 5, 11):
            env, wire = sealed[n]
            assert [t.raw for t in await _exchange(second.url, ident, wire, env)] == [terminals[n][0].raw]


def test_state_dir_none_and_bad_values(tmp_path: Path) -> None:
    import subprocess

    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    bad = subprocess.run([sys.executable, "-m", "ampcap.cli.main", "serve", "--demo", "--state-dir", ""],
                         capture_output=True, text=True, env=env, timeout=30)
    assert bad.returncode == 2 and "--state-dir" in bad.stderr and "Traceback" not in bad.stderr
    with serve_process(tmp_path, "--state-dir", "none") as proc:
        assert proc.terminate() == 0
    assert not (tmp_path / "none").exists()


def test_over_http_a_retry_after_kill_9_gets_the_same_bytes(tmp_path: Path) -> None:
    """The journal holds for replies sent through the HTTP binding (a
    ReplySink, not a connection): a CAP_INVOKE POSTed again after kill -9
    gets the very CAP_RESULT bytes of its first answer, and does not run again."""
    import time

    import httpx

    from ampcap.wire.bearer import mint
    from ampcap.wire.envelope import seal

    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    headers = {"content-type": "application/cbor", "x-amp-transport-version": "1"}

    def post(http: str, did: str, wire: bytes, *, token: bool = True) -> httpx.Response:
        h = dict(headers)
        if token:
            h["authorization"] = "Bearer " + mint(ident, did, now_ms=int(time.time() * 1000), entropy=os.urandom)
        return httpx.post(http + "/amp/v1/messages", content=wire, headers=h, timeout=10)

    def http_line(proc: Any) -> tuple[str, str]:
        assert proc.proc.stdout is not None
        http, did = proc.proc.stdout.readline().split()
        return http, did

    invoke = hello = b""
    with serve_process(tmp_path, "--http", "127.0.0.1:0", "--state-dir", str(state)) as first:
        http, did = http_line(first)
        now = int(time.time() * 1000)
        _, hello = seal(ident, typ=MessageType.HELLO, to=did, body={"versions": ["1.0"]}, now_ms=now,
                        entropy=os.urandom, ttl=60_000)
        _, invoke = seal(ident, typ=MessageType.CAP_INVOKE, to=did, now_ms=now, entropy=os.urandom, ttl=600_000,
                         body={"capability": "org.ampcap.demo.echo", "version": "1.0.0",
                               "params": {"message": "once over http"}})
        assert post(http, did, hello, token=False).status_code == 200
        before = post(http, did, invoke)
        assert before.status_code == 200
        _kill(first)
    with serve_process(tmp_path, "--http", "127.0.0.1:0", "--state-dir", str(state)) as second:
        http, did2 = http_line(second)
        assert did2 == did
        after = post(http, did, invoke)
        assert after.status_code == 200 and after.content == before.content


# ---------------------------------------- the 5002 is encrypted and threaded like any reply

THREAD, OTHER_THREAD = bytes(range(16)), bytes(range(16, 32))


def _journal_rows(state: Path) -> list[tuple[Any, ...]]:
    """The daemon's journal as another process reads it (WAL: safe while it runs)."""
    import sqlite3

    db = sqlite3.connect(state / "state.sqlite3", timeout=5.0)
    try:
        return db.execute("SELECT msg_id, state, encrypted, thread_id FROM invoke_journal").fetchall()
    finally:
        db.close()


async def _wait_running(state: Path, ids: set[bytes]) -> None:
    """Until the daemon has committed the ``running`` rows of ``ids`` (no sleep-and-hope before kill -9)."""
    with trio.fail_after(15):
        while {bytes(r[0]) for r in _journal_rows(state) if r[1] == "running"} < ids:
            await trio.sleep(0.05)


def _opened(raw: bytes, ident: Identity) -> Any:
    """The caller's view of a reply: decrypted with its own key when encrypted, signature checked."""
    import time

    from ampcap.wire.identity import DidKeyResolver
    from ampcap.wire.receive import ReceivePipeline

    return ReceivePipeline(DidKeyResolver(), decrypt_with=[ident], recipient=ident.did).check(
        raw, int(time.time() * 1000))


@pytest.mark.trio
async def test_after_kill_9_an_authcrypted_invoke_gets_an_encrypted_5002_on_its_thread(tmp_path: Path) -> None:
    """R19 with RFC 001 §8.5: the 5002 that closes an interrupted invoke is the
    reply it would have had: authcrypted to the caller when the invoke was,
    plain when it was not, on the invoke's thread; and it stays those bytes."""
    import time

    from ampcap.wire.envelope import seal
    from ampcap.wire.identity import x25519_from_did_key

    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    args = ("--state-dir", str(state))
    sleep = {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 60_000}}
    with serve_process(tmp_path, *args) as first:
        peer = first.did
        now = int(time.time() * 1000)
        enc_env, enc_wire = seal(ident, typ=MessageType.CAP_INVOKE, to=peer, body=sleep, now_ms=now,
                                 entropy=os.urandom, ttl=600_000, thread_id=THREAD,
                                 encrypt_to=x25519_from_did_key(peer))
        plain_env, plain_wire = seal(ident, typ=MessageType.CAP_INVOKE, to=peer, body=sleep, now_ms=now,
                                     entropy=os.urandom, ttl=600_000, thread_id=OTHER_THREAD)
        assert enc_env.enc is not None and plain_env.enc is None
        await _exchange(first.url, ident, enc_wire, enc_env, wait=False)
        await _exchange(first.url, ident, plain_wire, plain_env, wait=False)
        await _wait_running(state, {enc_env.id, plain_env.id})
        rows = {bytes(r[0]): r for r in _journal_rows(state)}
        assert rows[enc_env.id][2:] == (1, THREAD) and rows[plain_env.id][2:] == (0, OTHER_THREAD)
        _kill(first)
    with serve_process(tmp_path, *args) as second:
        [enc_cut] = await _exchange(second.url, ident, enc_wire, enc_env)
        env = enc_cut.envelope
        assert env.enc is not None and env.body is None  # nothing readable on the wire
        assert env.thread_id == THREAD and env.reply_to == enc_env.id and env.sender == peer
        seen = _opened(enc_cut.raw, ident)  # only the caller's key opens it
        assert seen.decrypted and seen.body["error"]["code"] == 5002
        assert "interrupted by a restart" in seen.body["error"]["message"]
        [plain_cut] = await _exchange(second.url, ident, plain_wire, plain_env)
        assert plain_cut.envelope.enc is None and plain_cut.envelope.thread_id == OTHER_THREAD
        assert plain_cut.envelope.body["error"]["code"] == 5002
        assert not _opened(plain_cut.raw, ident).decrypted
        # Every retry: those very bytes (R8).
        assert [t.raw for t in await _exchange(second.url, ident, enc_wire, enc_env)] == [enc_cut.raw]
        _kill(second)
    with serve_process(tmp_path, *args) as third:
        # Sealed once, journaled: a third life resends them, nothing re-sealed (a fresh nonce would differ).
        assert [t.raw for t in await _exchange(third.url, ident, enc_wire, enc_env)] == [enc_cut.raw]
        assert [t.raw for t in await _exchange(third.url, ident, plain_wire, plain_env)] == [plain_cut.raw]


def _as_version_1(state: Path) -> None:
    """Rewrite the journal table as ampcap wrote it before it kept encryption
    and thread ids (journal tables version 1), rows included."""
    import sqlite3

    db = sqlite3.connect(state / "state.sqlite3", isolation_level=None)
    db.executescript("""
        BEGIN;
        CREATE TABLE v1 (
            sender TEXT NOT NULL, msg_id BLOB NOT NULL, fingerprint BLOB NOT NULL, capability TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'done')), expires_at INTEGER NOT NULL,
            wire BLOB, wire_expires_at INTEGER, PRIMARY KEY (sender, msg_id)) WITHOUT ROWID;
        INSERT INTO v1 SELECT sender, msg_id, fingerprint, capability, state, expires_at, wire, wire_expires_at
            FROM invoke_journal;
        DROP TABLE invoke_journal;
        ALTER TABLE v1 RENAME TO invoke_journal;
        CREATE INDEX invoke_journal_expiry ON invoke_journal (expires_at);
        UPDATE schema_versions SET version = 1 WHERE component = 'journal';
        COMMIT;
    """)
    db.close()


@pytest.mark.trio
async def test_a_state_database_from_the_previous_version_opens_and_restores(tmp_path: Path) -> None:
    """A daemon killed while its database held version-1 journal tables comes
    back up with them migrated: a completed invoke's retry gets the same
    bytes, a running one its (plain, thread-less, as version 1 knew no
    better) 5002."""
    import sqlite3

    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    args = ("--state-dir", str(state))
    with serve_process(tmp_path, *args) as first:
        probe = await _probe(first.url, ident)
        echo_env, echo_wire = probe.seal(MessageType.CAP_INVOKE, {"id": "org.ampcap.demo.echo:1.0.0",
                                                                  "params": {"message": "v1"}})
        slow_env, slow_wire = probe.seal(MessageType.CAP_INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0",
                                                                  "params": {"ms": 60_000}})
        await probe.aclose()
        [before] = await _exchange(first.url, ident, echo_wire, echo_env)
        await _exchange(first.url, ident, slow_wire, slow_env, wait=False)
        await _wait_running(state, {slow_env.id})
        _kill(first)
    _as_version_1(state)
    with serve_process(tmp_path, *args) as second:
        assert [t.raw for t in await _exchange(second.url, ident, echo_wire, echo_env)] == [before.raw]
        [cut] = await _exchange(second.url, ident, slow_wire, slow_env)
        assert cut.envelope.body["error"]["code"] == 5002 and cut.envelope.enc is None
        db = sqlite3.connect(state / "state.sqlite3")
        try:
            assert db.execute("SELECT version FROM schema_versions WHERE component = 'journal'").fetchone() == (4,)
            columns = {r[1] for r in db.execute("PRAGMA table_info(invoke_journal)")}
            assert columns >= {"encrypted", "thread_id", "session"}
        finally:
            db.close()
        _kill(second)
    with serve_process(tmp_path, *args) as third:
        assert [t.raw for t in await _exchange(third.url, ident, slow_wire, slow_env)] == [cut.raw]


@pytest.mark.trio
async def test_after_kill_9_a_session_scoped_invoke_gets_a_5002_with_its_session(tmp_path: Path) -> None:
    """RFC 004 §7.4 / RFC 006 §4.4: a reply to a session-scoped invoke carries
    its signed session context; the 5002 that closes one cut short by a
    restart is such a reply, so the journal keeps the context for it."""
    import sqlite3
    import time

    import ampcap
    from ampcap.session.context import session_context
    from ampcap.wire.envelope import seal

    state = tmp_path / "state"
    ident = Identity.generate(os.urandom)
    args = ("--state-dir", str(state))
    with serve_process(tmp_path, *args) as first:
        peer = first.did
        async with ampcap.connect(first.url, identity=ident) as remote:
            session = remote.new_session()
            await session.open()
            sid = session.session_id
        body = {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 60_000}, "session": session_context(sid)}
        env, wire = seal(ident, typ=MessageType.CAP_INVOKE, to=peer, body=body, now_ms=int(time.time() * 1000),
                         entropy=os.urandom, ttl=600_000, thread_id=sid)
        await _exchange(first.url, ident, wire, env, wait=False)
        await _wait_running(state, {env.id})
        _kill(first)
    with serve_process(tmp_path, *args) as second:
        [cut] = await _exchange(second.url, ident, wire, env)
        reply = cut.envelope.body
        assert reply["status"] == "error" and reply["error"]["code"] == 5002
        assert reply["session"] == {"session_id": sid, "session_scope": True}
        assert cut.envelope.thread_id == sid
        _kill(second)
    with serve_process(tmp_path, *args) as third:
        assert [t.raw for t in await _exchange(third.url, ident, wire, env)] == [cut.raw]
        db = sqlite3.connect(state / "state.sqlite3")
        try:
            assert db.execute("SELECT version FROM schema_versions WHERE component = 'journal'").fetchone() == (4,)
        finally:
            db.close()
