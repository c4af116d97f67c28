"""Usage statistics per capability id: calls, successes, failures by code,
mean latency, p99 over a bounded window."""

from __future__ import annotations

import math
import random

import pytest

from ampcap.caps.stats import UsageStats


def test_counts_mean_and_p99_per_capability_id() -> None:
    stats = UsageStats(window=100)
    for ms in range(1, 201):
        stats.record("org.x.a:1.0.0", latency_ms=float(ms), code=None if ms % 10 else 5001)
    stats.record("org.x.b:1.0.0", latency_ms=5.0, code=4004)
    stats.record("org.x.b:1.0.0", latency_ms=7.0, code=5003)
    stats.record("org.x.b:1.0.0", latency_ms=9.0, code=4004)
    a = stats.get("org.x.a:1.0.0")
    assert a is not None
    assert (a.calls, a.successes, dict(a.failures)) == (200, 180, {5001: 20})
    assert a.success_rate == pytest.approx(0.9)
    assert a.mean_latency_ms == pytest.approx(100.5)  # exact over the whole life
    assert a.p99_latency_ms == 199.0  # over the last 100 calls: 101..200
    b = stats.get("org.x.b:1.0.0")
    assert b is not None and (b.calls, b.successes, dict(b.failures)) == (3, 0, {4004: 2, 5003: 1})
    assert b.success_rate == 0.0 and b.mean_latency_ms == pytest.approx(7.0) and b.p99_latency_ms == 9.0
    assert "org.x.b:1.0.0: 3 calls, 0 ok, failures 4004×2, 5003×1, mean 7.0 ms, p99 9.0 ms" == b.summary()
    assert stats.get("org.x.none:1.0.0") is None
    assert [s.capability_id for s in stats.snapshot()] == ["org.x.a:1.0.0", "org.x.b:1.0.0"]


def test_memory_stays_bounded_and_p99_tracks_recent_calls() -> None:
    stats = UsageStats(window=64)
    rnd = random.Random(4)
    for _ in range(10_000):
        stats.record("org.x.a:1.0.0", latency_ms=rnd.uniform(0, 10), code=None)
    for _ in range(64):  # a slow spell: the window now holds only it
        stats.record("org.x.a:1.0.0", latency_ms=1000.0, code=None)
    usage = stats.get("org.x.a:1.0.0")
    assert usage is not None and len(usage._recent) == 64
    assert usage.p99_latency_ms == 1000.0
    assert usage.calls == 10_064 and usage.mean_latency_ms < 20


def test_p99_of_a_known_distribution() -> None:
    stats = UsageStats(window=1000)
    values = list(range(1, 1001))
    random.Random(1).shuffle(values)
    for ms in values:
        stats.record("c:1.0.0", latency_ms=float(ms), code=None)
    usage = stats.get("c:1.0.0")
    assert usage is not None and usage.p99_latency_ms == 990.0  # nearest rank: ceil(0.99 × 1000)


def test_nothing_recorded_is_nan_not_an_error() -> None:
    from ampcap.caps.stats import CapabilityUsage

    empty = CapabilityUsage("org.x.a:1.0.0", 8)
    assert math.isnan(empty.success_rate) and math.isnan(empty.mean_latency_ms) and math.isnan(empty.p99_latency_ms)
