"""Replay cache: (from, id) keys, expiry at ts+ttl, fingerprints, bounded memory."""

from __future__ import annotations

import pytest

from ampcap.wire.replay import ReplayCache, ReplayStatus


def test_new_duplicate_conflict() -> None:
    cache = ReplayCache()
    assert cache.check_and_store("a", b"1", expires_at=100, fingerprint=b"f", now_ms=0) is ReplayStatus.NEW
    assert cache.check_and_store("a", b"1", expires_at=100, fingerprint=b"f", now_ms=1) is ReplayStatus.DUPLICATE
    assert cache.check_and_store("a", b"1", expires_at=100, fingerprint=b"g", now_ms=2) is ReplayStatus.CONFLICT
    # the first fingerprint is kept
    assert cache.get("a", b"1").fingerprint == b"f"  # type: ignore[union-attr]
    # same id from another sender is a different message
    assert cache.check_and_store("b", b"1", expires_at=100, fingerprint=b"g", now_ms=2) is ReplayStatus.NEW


def test_entries_live_until_expiry() -> None:
    cache = ReplayCache()
    cache.check_and_store("a", b"1", expires_at=100, fingerprint=b"f", now_ms=0)
    assert cache.check_and_store("a", b"1", expires_at=100, fingerprint=b"f", now_ms=100) is ReplayStatus.DUPLICATE
    assert cache.check_and_store("z", b"z", expires_at=500, fingerprint=b"f", now_ms=101) is ReplayStatus.NEW
    assert ("a", b"1") not in cache and len(cache) == 1


def test_already_expired_messages_are_not_stored() -> None:
    cache = ReplayCache()
    assert cache.check_and_store("a", b"1", expires_at=5, fingerprint=b"f", now_ms=10) is ReplayStatus.NEW
    assert len(cache) == 0


def test_bounded_evicts_soonest_expiring() -> None:
    cache = ReplayCache(max_entries=3)
    for i, expiry in enumerate((300, 100, 200)):
        cache.check_and_store("a", bytes([i]), expires_at=expiry, fingerprint=b"f", now_ms=0)
    cache.check_and_store("a", b"new", expires_at=1000, fingerprint=b"f", now_ms=0)
    assert len(cache) == 3 and cache.evicted == 1
    assert ("a", bytes([1])) not in cache  # expiry 100 went first
    assert ("a", bytes([0])) in cache and ("a", b"new") in cache


def test_memory_stays_bounded_under_flood() -> None:
    cache = ReplayCache(max_entries=100)
    for i in range(5000):
        cache.check_and_store("s", i.to_bytes(4, "big"), expires_at=10_000 + (i % 37), fingerprint=b"f", now_ms=i)
    assert len(cache) == 100
    assert len(cache._heap) <= 2 * 100 + 64 + 1


def test_heap_is_compacted_after_expiry() -> None:
    cache = ReplayCache(max_entries=10_000)
    for i in range(1000):
        cache.check_and_store("s", i.to_bytes(4, "big"), expires_at=i, fingerprint=b"f", now_ms=0)
    cache.check_and_store("s", b"late", expires_at=10_000, fingerprint=b"f", now_ms=5_000)
    assert len(cache) == 1 and len(cache._heap) <= 64 + 3


def test_invalid_size() -> None:
    with pytest.raises(ValueError):
        ReplayCache(max_entries=0)


def test_peek_does_not_store() -> None:
    cache = ReplayCache()
    assert cache.peek("a", b"1", b"f", 0) is ReplayStatus.NEW
    assert len(cache) == 0
    cache.check_and_store("a", b"1", expires_at=10, fingerprint=b"f", now_ms=0)
    assert cache.peek("a", b"1", b"f", 5) is ReplayStatus.DUPLICATE
    assert cache.peek("a", b"1", b"g", 5) is ReplayStatus.CONFLICT
    assert cache.peek("a", b"1", b"f", 11) is ReplayStatus.NEW


def test_entries_are_not_tracked_by_the_garbage_collector() -> None:
    # A busy daemon keeps one entry per message received; the collector must
    # not have to walk them (they hold only strings, bytes and ints).
    import gc

    cache = ReplayCache()
    for i in range(3):
        cache.check_and_store("did:key:a", bytes([i]) * 16, expires_at=100, fingerprint=b"f" * 16, now_ms=0)
    gc.collect()
    assert not any(gc.is_tracked(k) or gc.is_tracked(v) for k, v in cache._entries.items())
    assert all(not gc.is_tracked(item) for item in cache._heap)
