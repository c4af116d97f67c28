"""The store is the record (R8, R19, R25): memory is a bounded cache in front
of the journal. Past the cache's size, and after a restart, a retry gets
the terminal bytes from the store; only RUNNING rows are read at start; a
plain new invoke never asks the store. Sans-I/O executor over a real
journal on both backends (``store_target``); tests/store/
test_journal_restart.py::test_a_retry_past_the_cache_and_a_restart_is_answered_from_the_store
does it with a real daemon process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
from exec_helpers import ALICE, INVOKE, RESULT, SEAL, T0, DemoRegistry, DemoResolver, manifest, message, sends  # noqa: E402

from ampcap.caps.params import ParamsValidator  # noqa: E402
from ampcap.peer.dedupe import InvokeKey  # noqa: E402
from ampcap.peer.executor import INTERRUPTED, Execute, Executor, ExecutorConfig  # noqa: E402
from ampcap.peer.journal import ClaimStatus, JournalRecord, JournalState, Persist  # noqa: E402
from ampcap.store import open_store  # noqa: E402
from ampcap.store.journal import StoreJournal  # noqa: E402
from ampcap.wire.envelope import decode_envelope  # noqa: E402

ECHO = {"id": "org.ampcap.demo.echo:1.0.0", "params": {"message": "hi"}}
SLEEP = {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 10}}
CACHE = 4  # the test's cache size; it runs past it


class Counted:
    """The real journal, counting the executor's lookups (how often a miss reaches the store)."""

    def __init__(self, journal: StoreJournal) -> None:
        self.journal, self.finds = journal, 0

    def find(self, key: InvokeKey, now_ms: int) -> JournalRecord | None:
        self.finds += 1
        return self.journal.find(key, now_ms)


def _executor(records: Counted) -> Executor:
    m = manifest()
    resolver = DemoResolver(m)
    return Executor(registry=DemoRegistry(resolver), resolver=resolver, params=ParamsValidator(m.schema_store()),
                    seal=SEAL, journal=True, records=records, config=ExecutorConfig(cache_entries=CACHE))


def _edge(journal: StoreJournal, actions: list[Any]) -> list[Any]:
    """What the daemon does: commit the Persist records before the rest."""
    for action in actions:
        if isinstance(action, Persist):
            journal.write(action.records)
    return [a for a in actions if not isinstance(a, Persist)]


def _invoke(ex: Executor, journal: StoreJournal, inbound: Any, now: int) -> bytes:
    started = _edge(journal, ex.handle(inbound, "c1", now))
    job = next(a.job for a in started if isinstance(a, Execute))
    [sent] = sends(_edge(journal, ex.complete(job.key, result={"n": now}, now_ms=now + 1)), RESULT)
    assert sent.out.wire is not None
    return sent.out.wire


def test_past_the_cache_and_after_a_restart_the_store_answers(store_target: str) -> None:
    journal = StoreJournal(open_store(store_target))
    records = Counted(journal)
    ex = _executor(records)
    first = message(ALICE, INVOKE, ECHO, T0)
    first_wire = _invoke(ex, journal, first, T0)
    rejected = message(ALICE, INVOKE, {"id": "org.ampcap.demo.nothing:1.0.0", "params": {}}, T0 + 1)
    [refusal] = sends(_edge(journal, ex.handle(rejected, "c1", T0 + 1)))
    assert refusal.out.body["code"] == 4002
    for n in range(3 * CACHE):
        _invoke(ex, journal, message(ALICE, INVOKE, ECHO, T0 + 10 + n), T0 + 10 + n)
    assert records.finds == 0  # new invokes with fresh ids never ask the store
    # Memory forgot both (its horizon says "maybe seen"): the store answers with the bytes first sent.
    [again] = sends(ex.handle(first, "c2", T0 + 1_000))
    assert again.out.wire == first_wire and records.finds == 1
    [refused_again] = sends(ex.handle(rejected, "c2", T0 + 1_000))
    assert refused_again.out.wire == refusal.out.wire

    # A restart: nothing is loaded but the RUNNING rows (none here).
    assert journal.load_running(T0 + 2_000) == []
    fresh = _executor(Counted(journal))
    assert fresh.preload([], T0 + 2_000, lambda cid: False, remembered_until=journal.latest_expiry()) == ([], [])
    [after] = sends(fresh.handle(first, "c3", T0 + 2_100))
    assert after.out.wire == first_wire
    # A message newer than the start (beyond clock skew) is new for sure: no lookup.
    before = fresh.records.finds  # type: ignore[union-attr]
    later = T0 + 2_000 + 60_000
    _invoke(fresh, journal, message(ALICE, INVOKE, ECHO, later), later)
    assert fresh.records.finds == before  # type: ignore[union-attr]
    # The same id with other content is still no retry (4001), from the store too.
    other = message(ALICE, INVOKE, {"id": "org.ampcap.demo.echo:1.0.0", "params": {"message": "other"}}, T0,
                    msg_id=first.envelope.id)
    [conflict] = sends(fresh.handle(other, "c3", T0 + 2_200))
    assert conflict.out.body["code"] == 4001 and "different content" in conflict.out.body["message"]


def test_running_rows_from_an_earlier_life_or_a_dead_worker(store_target: str) -> None:
    journal = StoreJournal(open_store(store_target))
    old = _executor(Counted(journal))
    slow = message(ALICE, INVOKE, SLEEP, T0)
    _edge(journal, old.handle(slow, "c1", T0))  # RUNNING, and then the process dies
    [running] = journal.load_running(T0 + 100)
    # A start-up closes it with 5002 (the daemon's path: only RUNNING rows are read).
    fresh = _executor(Counted(journal))
    closed, _ = fresh.preload(journal.load_running(T0 + 100), T0 + 100, lambda cid: False,
                              remembered_until=journal.latest_expiry())
    journal.write(closed)
    [cut] = sends(fresh.handle(slow, "c2", T0 + 200), RESULT)
    assert decode_envelope(cut.out.wire).body["error"]["message"] == INTERRUPTED

    # A worker's claim: while its lease lives the executor accepts the
    # duplicate as new, and the edge's claim finds it held (peer/claims.py:
    # PROCESSING, then its bytes); once the lease lapsed, it is closed.
    other = message(ALICE, INVOKE, SLEEP, T0 + 1)
    claimed = msgspec.structs.replace(running, key=InvokeKey(ALICE.did, other.envelope.id),
                                      fingerprint=other.fingerprint, owner="w9", lease_until=T0 + 5_000)
    journal.write([claimed])
    ex = _executor(Counted(journal))
    ex.preload([], T0 + 300, lambda cid: False, remembered_until=journal.latest_expiry())
    accepted = ex.handle(other, "c3", T0 + 300)
    assert isinstance(accepted[0], Persist) and accepted[0].records[0].state is JournalState.RUNNING
    assert journal.claim(accepted[0].records[0], "w1", T0 + 9_000, T0 + 300).status is ClaimStatus.HELD
    ex = _executor(Counted(journal))
    ex.preload([], T0 + 300, lambda cid: False, remembered_until=journal.latest_expiry())
    actions = ex.handle(other, "c3", T0 + 6_000)
    assert isinstance(actions[0], Persist) and actions[0].records[0].state is JournalState.DONE
    [lapsed] = sends(actions, RESULT)
    assert decode_envelope(lapsed.out.wire).body["error"]["code"] == 5002
    # An idempotent capability's abandoned invoke runs again instead.
    third = message(ALICE, INVOKE, SLEEP, T0 + 2)
    journal.write([msgspec.structs.replace(claimed, key=InvokeKey(ALICE.did, third.envelope.id),
                                           fingerprint=third.fingerprint)])
    idem = _executor(Counted(journal))
    idem.preload([], T0 + 300, lambda cid: True, remembered_until=journal.latest_expiry())
    assert any(isinstance(a, Execute) for a in idem.handle(third, "c3", T0 + 6_000))


def test_an_unreadable_store_is_a_retryable_5002(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s"))
    journal = StoreJournal(store)
    ex = _executor(Counted(journal))
    first = message(ALICE, INVOKE, ECHO, T0)
    _invoke(ex, journal, first, T0)
    for n in range(2 * CACHE):
        _invoke(ex, journal, message(ALICE, INVOKE, ECHO, T0 + 10 + n), T0 + 10 + n)
    store.close()
    [refusal] = sends(ex.handle(first, "c2", T0 + 1_000))
    assert refusal.out.body["code"] == 5002 and "state store" in refusal.out.body["message"]
