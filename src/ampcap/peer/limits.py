"""Bounds on concurrent work and on time.

:class:`InFlightLimits` caps how many accepted invocations run at once, per
connection and for the whole daemon; a request beyond either cap is refused
with ``5004 OVERLOADED`` before any work is done (RFC 004 §7.2 step 2).
Every operation is O(1) and the table holds one counter per connection that
currently has work running, so it cannot grow beyond the global cap.

:class:`DeadlineQueue` is the time side: a heap of ``(deadline, key)`` that
the executor and the invoker use to answer ``get_timer()`` in O(1) and to
find expired entries in O(log n) each. Entries are removed lazily: a key's
deadline can be moved or dropped, and stale heap items are skipped when they
surface (and the heap is rebuilt when stale items dominate, so memory stays
proportional to the live entries).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..errors import AmpError

__all__ = ["InFlightLimits", "DeadlineQueue", "OVERLOADED"]

OVERLOADED = 5004


@dataclass(slots=True)
class InFlightLimits:
    """Per-connection and global caps on running invocations."""

    per_connection: int = 64
    total: int = 1024
    _by_conn: dict[Hashable, int] = field(default_factory=dict, init=False, repr=False)
    _total: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.per_connection < 1 or self.total < 1:
            raise ValueError("in-flight limits must be at least 1")

    @property
    def in_flight(self) -> int:
        return self._total

    def count(self, conn: Hashable) -> int:
        return self._by_conn.get(conn, 0)

    def has_room(self, conn: Hashable) -> bool:
        return self._total < self.total and self._by_conn.get(conn, 0) < self.per_connection

    def check(self, conn: Hashable) -> None:
        """Raise ``AmpError(5004)`` when one more job would exceed a cap."""
        if not self.has_room(conn):
            # Which cap was hit is not the caller's business; retry later.
            raise AmpError(OVERLOADED, "too many invocations in flight; retry later")

    def acquire(self, conn: Hashable) -> None:
        self.check(conn)
        self._by_conn[conn] = self._by_conn.get(conn, 0) + 1
        self._total += 1

    def release(self, conn: Hashable) -> None:
        n = self._by_conn.get(conn, 0)
        if n <= 0:
            raise RuntimeError("release without acquire")  # a bug in the caller, not input
        if n == 1:
            del self._by_conn[conn]  # keep the table as small as the live work
        else:
            self._by_conn[conn] = n - 1
        self._total -= 1


K = TypeVar("K", bound=Hashable)


class DeadlineQueue(Generic[K]):
    """Deadlines by key: ``set``, ``discard``, ``next_deadline``, ``pop_due``."""

    def __init__(self) -> None:
        self._live: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []
        self._seq = 0  # tie-breaker: keys need not be orderable

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def get(self, key: K) -> int | None:
        return self._live.get(key)

    def set(self, key: K, deadline_ms: int) -> None:
        self._live[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        self._compact()

    def discard(self, key: K) -> None:
        self._live.pop(key, None)
        self._compact()

    def next_deadline(self) -> int | None:
        self._skip_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[K]:
        """Remove and return every key whose deadline is ``<= now_ms``, earliest first."""
        due: list[K] = []
        while True:
            self._skip_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                return due
            _, _, key = heapq.heappop(self._heap)
            del self._live[key]
            due.append(key)

    def pop_earliest(self) -> K | None:
        """Remove and return the key with the earliest deadline (None when empty)."""
        self._skip_stale()
        if not self._heap:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._live[key]
        return key

    def _skip_stale(self) -> None:
        heap = self._heap
        while heap and self._live.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [(d, i, k) for i, (k, d) in enumerate(self._live.items())]
            heapq.heapify(self._heap)
