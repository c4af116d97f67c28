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
    closed = fresh.preload([done, running], T0 + 100, idempotent=lambda cid: False)
    assert len(closed) == 1 and closed[0].state is JournalState.DONE
    error = decode_envelope(closed[0].terminal.wire).body["error"]
    assert (error["code"], error["message"]) == (5002, INTERRUPTED)
    [retry] = sends(fresh.handle(echo, "c9", T0 + 200), RESULT)
    assert retry.out.wire == done.terminal.wire  # the bytes first sent, across the restart
    [cut] = sends(fresh.handle(sleep, "c9", T0 + 200), RESULT)
    assert cut.out.wire == closed[0].terminal.wire
    # An idempotent capability's interrupted invoke is not answered from the journal: it runs again.
    other = _executor()
    assert other.preload([running], T0 + 100, idempotent=lambda cid: True) == []
    assert any(isinstance(a, Execute) for a in other.handle(sleep, "c9", T0 + 200))


def test_a_record_keeps_its_shape() -> None:
    import pytest

    from ampcap.peer.dedupe import InvokeKey

    with pytest.raises(ValueError):
        JournalRecord(key=InvokeKey("did:x", bytes(16)), fingerprint=b"", capability_id="a:1.0.0",
                      state=JournalState.DONE, expires_at=0)
