"""The R8 idempotency cache on its own."""

from __future__ import annotations

import pytest

from ampcap.peer.dedupe import ENTRY_OVERHEAD, CacheStatus, Horizon, InvokeCache, InvokeKey, Terminal

K = InvokeKey("did:key:a", b"\x01" * 16)
FP, OTHER = b"f" * 16, b"g" * 16
# The cache keeps a terminal as the bytes first sent and when they expire.
RESULT = Terminal(b"signed CAP_RESULT bytes", 10**9)


def test_lifecycle_running_then_done() -> None:
    c = InvokeCache()
    assert c.lookup(K, FP, 0).status is CacheStatus.NEW
    c.start(K, FP, "A", expires_at=1000)
    assert c.lookup(K, FP, 1).status is CacheStatus.RUNNING
    assert c.add_waiter(K, "B") and c.add_waiter(K, "B") and c.add_waiter(K, "A")  # each waits once
    assert c.finish(K, RESULT, 2) == ("A", "B")
    hit = c.lookup(K, FP, 3)
    assert hit.status is CacheStatus.DONE and hit.terminal is not None
    assert hit.terminal == RESULT  # the same message again, byte for byte (R8)
    with pytest.raises(RuntimeError):
        c.finish(K, RESULT, 4)
    with pytest.raises(RuntimeError):
        c.add_waiter(K, "C")


def test_conflict_never_hands_out_the_entry() -> None:
    c = InvokeCache()
    c.start(K, FP, "A", expires_at=1000)
    c.finish(K, RESULT, 0)
    hit = c.lookup(K, OTHER, 1)
    assert hit.status is CacheStatus.CONFLICT and hit.terminal is None
    assert c.lookup(InvokeKey("did:key:b", K.msg_id), FP, 1).status is CacheStatus.NEW  # key includes sender


def test_entries_expire_after_ttl_but_running_ones_stay() -> None:
    c = InvokeCache()
    c.remember(K, FP, RESULT, expires_at=100, now_ms=0)
    assert c.lookup(K, FP, 100).status is CacheStatus.DONE  # still valid at ts + ttl
    assert c.lookup(K, FP, 101).status is CacheStatus.NEW
    k2 = InvokeKey("did:key:a", b"\x02" * 16)
    c.start(k2, FP, "A", expires_at=10)
    assert c.lookup(k2, FP, 10_000).status is CacheStatus.RUNNING  # outlived its message, still running
    c.finish(k2, RESULT, 10_000)
    assert c.lookup(k2, FP, 10_000).status is CacheStatus.DONE  # a racing retry still finds it
    c.remember(K, FP, RESULT, expires_at=50, now_ms=100)  # already expired: not stored
    assert c.lookup(K, FP, 100).status is CacheStatus.NEW


def test_memory_bound_evicts_done_soonest_expiry_never_running() -> None:
    c = InvokeCache(max_entries=3)
    running = InvokeKey("did:key:r", b"\x00" * 16)
    c.start(running, FP, "A", expires_at=1)
    for i in range(10):
        c.remember(InvokeKey("did:key:a", bytes([i + 1]) * 16), FP, RESULT, expires_at=1000 + i, now_ms=0)
    assert len(c) == 3 and c.evicted == 8
    assert c.lookup(running, FP, 0).status is CacheStatus.RUNNING
    assert c.lookup(InvokeKey("did:key:a", bytes([10]) * 16), FP, 0).status is CacheStatus.DONE  # latest expiry kept


def test_waiters_are_bounded_and_dropped_on_close() -> None:
    c = InvokeCache(max_waiters=2)
    c.start(K, FP, "A", expires_at=1000)
    assert c.add_waiter(K, "B") and not c.add_waiter(K, "C") and c.add_waiter(K, "B")
    c.drop_waiter("A")
    assert c.waiters(K) == ("B",)
    assert c.finish(K, RESULT, 0) == ("B",)


def big_result(size: int, key: InvokeKey) -> Terminal:
    return Terminal(key.msg_id + b"r" * (size - 16), 10**9)


def test_kept_terminals_stay_within_the_byte_budget() -> None:
    # A caller cannot make the cache hold max_entries results of a message's
    # size each: past max_bytes the soonest-expiring terminals are dropped.
    c = InvokeCache(max_entries=1000, max_bytes=100_000)
    keys = [InvokeKey("did:key:a", i.to_bytes(16, "big")) for i in range(50)]
    for i, key in enumerate(keys):
        c.start(key, FP, "A", expires_at=1000 + i)
        c.finish(key, big_result(10_000, key), 0)
        assert c.kept_bytes <= c.max_bytes
    assert c.kept_bytes > c.max_bytes - (10_000 + ENTRY_OVERHEAD)  # the budget is used, not wasted
    assert c.forgotten == 50 - 9 and len(c) == 50
    assert c.lookup(keys[-1], FP, 0).status is CacheStatus.DONE  # latest expiry kept
    # R8 still holds for the dropped ones: recognised, never NEW again until expiry.
    assert c.lookup(keys[0], FP, 0).status is CacheStatus.FORGOTTEN
    assert c.lookup(keys[0], OTHER, 0).status is CacheStatus.CONFLICT
    assert c.lookup(keys[0], FP, 1001).status is CacheStatus.NEW  # expired with its message


def test_bytes_are_returned_when_entries_expire_or_are_evicted() -> None:
    c = InvokeCache(max_entries=2, max_bytes=10**9)
    for i in range(5):
        key = InvokeKey("did:key:a", bytes([i + 1]) * 16)
        c.remember(key, FP, big_result(1000, key), expires_at=100 + i, now_ms=0)
    assert len(c) == 2 and c.evicted == 3
    assert c.kept_bytes == 2 * (ENTRY_OVERHEAD + 1000)
    c.lookup(K, FP, 1000)  # everything expired meanwhile
    assert len(c) == 0 and c.kept_bytes == 0


def test_finished_entries_cost_the_garbage_collector_nothing() -> None:
    # One entry per invoke served stays for the message's lifetime; none of it
    # may be tracked by the GC, or every collection would walk all of them.
    import gc

    c = InvokeCache()
    for i in range(3):
        key = InvokeKey("did:key:a", bytes([i + 1]) * 16)
        c.start(key, FP, "A", expires_at=1000)
        c.finish(key, big_result(100, key), 0)
    gc.collect()  # CPython untracks tuples of untracked values during a collection
    entries = list(c._entries.items())
    assert entries and not any(gc.is_tracked(k) or gc.is_tracked(v) or gc.is_tracked(v[2]) for k, v in entries)


def test_a_terminal_message_past_its_expiry_is_not_handed_out() -> None:
    # R8 amended: the first terminal is sent again only while it lives; after
    # that the executor answers 4001 rather than re-sign a new message.
    c = InvokeCache()
    c.start(K, FP, "A", expires_at=10_000)
    c.finish(K, Terminal(b"reply", 500), 0)
    assert c.lookup(K, FP, 500).status is CacheStatus.DONE  # still valid at ts + ttl
    hit = c.lookup(K, FP, 501)
    assert hit.status is CacheStatus.EXPIRED and hit.terminal is None
    assert c.lookup(K, OTHER, 501).status is CacheStatus.CONFLICT



def key_at(sender: str, ts: int, n: int = 0) -> InvokeKey:
    return InvokeKey(sender, ts.to_bytes(8, "big") + n.to_bytes(8, "big"))


def test_evicted_invokes_leave_a_horizon_until_they_expire() -> None:
    c = InvokeCache(max_entries=2)
    for ts in (10, 20, 30):
        c.remember(key_at("did:key:a", ts), FP, RESULT, expires_at=1000 + ts, now_ms=0)
    assert c.evicted == 1  # the entry of ts 10 went before its message expired
    # Anything of a's as old as that may be its retry; newer ids and other senders are new.
    assert c.lookup(key_at("did:key:a", 10), FP, 50).status is CacheStatus.UNCERTAIN
    assert c.lookup(key_at("did:key:a", 5, 1), FP, 50).status is CacheStatus.UNCERTAIN
    assert c.lookup(key_at("did:key:a", 11), FP, 50).status is CacheStatus.NEW
    assert c.lookup(key_at("did:key:b", 5), FP, 50).status is CacheStatus.NEW
    assert c.lookup(key_at("did:key:a", 20), FP, 50).status is CacheStatus.DONE
    # Once the evicted message has expired the pipeline refuses its retries (1003).
    assert c.lookup(key_at("did:key:a", 10), FP, 1011).status is CacheStatus.NEW


def test_horizon_stays_bounded_by_folding_senders_into_one() -> None:
    h = Horizon(max_senders=2)
    h.forget(key_at("did:key:a", 100), 5000, now_ms=0)
    h.forget(key_at("did:key:b", 50), 9000, now_ms=0)
    h.forget(key_at("did:key:c", 10), 3000, now_ms=0)  # a, least recently updated, now covers everyone
    assert len(h) == 2
    assert h.covers(key_at("did:key:z", 100), 0) and not h.covers(key_at("did:key:z", 101), 0)
    assert h.covers(key_at("did:key:b", 50), 0) and h.covers(key_at("did:key:c", 10), 0)
    assert not h.covers(key_at("did:key:z", 100), 5001)  # everything a's covered has expired
    assert h.covers(key_at("did:key:b", 50), 5001) and not h.covers(key_at("did:key:b", 50), 9001)
    assert len(h) == 1  # b, asked about after it lapsed, is gone; c lapsed unasked
    h.forget(key_at("did:key:d", 1), 20_000, now_ms=9001)
    h.forget(key_at("did:key:e", 1), 20_000, now_ms=9001)  # folds c, which lapsed: nothing to cover
    assert not h.covers(key_at("did:key:z", 10), 9001)
