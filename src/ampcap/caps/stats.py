"""Usage statistics per capability id: calls, successes, failures by code,
mean latency and p99 (the spec map's naming ideas; OSSA "usage stats").

Memory is bounded per capability: counts and a running mean are exact over
the daemon's life; the p99 is taken over the most recent ``window``
latencies (a ring buffer), which is also what an operator wants to see.
Sans-I/O: the daemon measures latency and calls :meth:`UsageStats.record`.
"""

from __future__ import annotations

import math
from collections import Counter

import msgspec

__all__ = ["CapabilityUsage", "UsageStats"]


class CapabilityUsage(msgspec.Struct):
    capability_id: str
    window: int
    calls: int = 0
    successes: int = 0
    failures: Counter[int] = msgspec.field(default_factory=Counter)
    _total_ms: float = 0.0
    _recent: list[float] = msgspec.field(default_factory=list)
    _next: int = 0

    def record(self, latency_ms: float, code: int | None) -> None:
        self.calls += 1
        if code is None:
            self.successes += 1
        else:
            self.failures[code] += 1
        self._total_ms += latency_ms
        if len(self._recent) < self.window:
            self._recent.append(latency_ms)
        else:
            self._recent[self._next] = latency_ms
            self._next = (self._next + 1) % self.window

    @property
    def success_rate(self) -> float:
        return self.successes / self.calls if self.calls else math.nan

    @property
    def mean_latency_ms(self) -> float:
        return self._total_ms / self.calls if self.calls else math.nan

    @property
    def p99_latency_ms(self) -> float:
        if not self._recent:
            return math.nan
        ordered = sorted(self._recent)
        return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]

    def summary(self) -> str:
        failed = ", ".join(f"{code}×{n}" for code, n in sorted(self.failures.items())) or "none"
        return (f"{self.capability_id}: {self.calls} calls, {self.successes} ok, failures {failed}, "
                f"mean {self.mean_latency_ms:.1f} ms, p99 {self.p99_latency_ms:.1f} ms")


class UsageStats:
    def __init__(self, *, window: int = 1024) -> None:
        self.window = window
        self._by_id: dict[str, CapabilityUsage] = {}

    def record(self, capability_id: str, *, latency_ms: float, code: int | None) -> None:
        usage = self._by_id.get(capability_id)
        if usage is None:
            usage = self._by_id[capability_id] = CapabilityUsage(capability_id, self.window)
        usage.record(latency_ms, code)

    def get(self, capability_id: str) -> CapabilityUsage | None:
        return self._by_id.get(capability_id)

    def snapshot(self) -> list[CapabilityUsage]:
        return [self._by_id[k] for k in sorted(self._by_id)]
