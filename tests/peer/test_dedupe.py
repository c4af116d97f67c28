"""The R8 idempotency cache on its own."""

from __future__ import annotations

import pytest

from ampcap.peer.dedupe import CacheStatus, InvokeCache, InvokeKey
from ampcap.peer.outbound import Outbound

K = InvokeKey("did:key:a", b"\x01" * 16)
FP, OTHER = b"f" * 16, b"g" * 16
RESULT = Outbound(typ=0x23, body={"status": "success", "result": 1}, reply_to=K.msg_id)


def test_lifecycle_running_then_done() -> None:
    c = InvokeCache()
    assert c.lookup(K, FP, 0).status is CacheStatus.NEW
    c.start(K, FP, "A", expires_at=1000)
    assert c.lookup(K, FP, 1).status is CacheStatus.RUNNING
    assert c.add_waiter(K, "B") and not c.add_waiter(K, "B") and not c.add_waiter(K, "A")
    assert c.finish(K, RESULT, 2) == ("A", "B")
    hit = c.lookup(K, FP, 3)
    assert hit.status is CacheStatus.DONE and hit.terminal is RESULT
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
    assert c.add_waiter(K, "B") and not c.add_waiter(K, "C")
    c.drop_waiter("A")
    assert c.waiters(K) == ("B",)
    assert c.finish(K, RESULT, 0) == ("B",)
