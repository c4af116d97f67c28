"""Replay cache (RFC 001 §8.4) keyed by ``(from, id)``.

An entry lives until its message expires (``ts + ttl``): after that the
receive pipeline rejects the message as expired (1003) anyway, so remembering
it longer buys nothing. Each entry keeps a fingerprint of what was signed
(a hash of Sig_Input, i.e. every signed header plus the plaintext body), so a
true retry (same fingerprint) can be told apart from a reuse of ``(from, id)``
with different content (the executor refuses such a CAP_INVOKE with 4001, ruling R8).

Memory is bounded by ``max_entries``. When full, the entry that expires
soonest is evicted. The trade-off: under a flood of long-lived distinct
messages, a short-lived message's entry may be evicted before it expires and
a replay of it within its remaining lifetime would be seen as new. Evicting the
soonest-expiring entry keeps that window as small as the bound allows (those
entries were about to be dropped anyway) and cannot be exploited to push out
long-lived entries with short-lived junk. Operations are O(log n) (a heap of
expiry times with lazy deletion).

Entries are stored as plain ``(expires_at, fingerprint)`` tuples of scalars:
CPython stops tracking such tuples in the garbage collector, so a full cache
(one entry per message received) adds nothing to every later collection.
"""

from __future__ import annotations

import enum
import heapq

import msgspec

__all__ = ["ReplayStatus", "ReplayEntry", "ReplayCache"]


class ReplayStatus(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"  # same (from, id), same signed content: a retry
    CONFLICT = "conflict"  # same (from, id), different signed content


class ReplayEntry(msgspec.Struct, frozen=True):
    expires_at: int
    fingerprint: bytes


class ReplayCache:
    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self.max_entries = max_entries
        self._entries: dict[tuple[str, bytes], tuple[int, bytes]] = {}  # (expires_at, fingerprint)
        self._heap: list[tuple[int, str, bytes]] = []
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, sender: str, message_id: bytes) -> ReplayEntry | None:
        entry = self._entries.get((sender, message_id))
        return ReplayEntry(*entry) if entry is not None else None

    def _purge(self, now_ms: int) -> None:
        heap = self._heap
        entries = self._entries
        while heap and heap[0][0] < now_ms:
            expires, sender, mid = heapq.heappop(heap)
            entry = entries.get((sender, mid))
            if entry is not None and entry[0] == expires:
                del entries[(sender, mid)]
        # Lazy deletion leaves stale heap items; rebuild when they dominate.
        if len(heap) > 2 * len(entries) + 64:
            self._heap = [(e[0], s, m) for (s, m), e in entries.items()]
            heapq.heapify(self._heap)

    def _evict_one(self) -> None:
        heap = self._heap
        while heap:
            expires, sender, mid = heapq.heappop(heap)
            entry = self._entries.get((sender, mid))
            if entry is not None and entry[0] == expires:
                del self._entries[(sender, mid)]
                self.evicted += 1
                return

    def peek(self, sender: str, message_id: bytes, fingerprint: bytes, now_ms: int) -> ReplayStatus:
        """What :meth:`check_and_store` would answer, without recording anything."""
        entry = self._entries.get((sender, message_id))
        if entry is None or entry[0] < now_ms:
            return ReplayStatus.NEW
        return ReplayStatus.DUPLICATE if entry[1] == fingerprint else ReplayStatus.CONFLICT

    def check_and_store(self, sender: str, message_id: bytes, *, expires_at: int, fingerprint: bytes,
                        now_ms: int) -> ReplayStatus:
        """Record a verified message; say whether it was seen before.

        A duplicate or conflict leaves the stored entry untouched (the first
        message seen keeps its fingerprint).
        """
        self._purge(now_ms)
        key = (sender, message_id)
        entry = self._entries.get(key)
        if entry is not None:
            return ReplayStatus.DUPLICATE if entry[1] == fingerprint else ReplayStatus.CONFLICT
        if expires_at < now_ms:
            return ReplayStatus.NEW  # already expired: nothing worth remembering
        while len(self._entries) >= self.max_entries:
            self._evict_one()
        self._entries[key] = (expires_at, fingerprint)
        heapq.heappush(self._heap, (expires_at, sender, message_id))
        return ReplayStatus.NEW
