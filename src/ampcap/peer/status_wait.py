"""Delegated invokes waiting for a revocation status (RFC 005 §6.3, §7.3; ruling R20).

With a revocation publisher configured, a chain whose status is stale or
not cached must not be refused before the publisher was asked: the status
is queried first, within a short bound, and the invoke decided on the
answer; 5002 only when the publisher could not answer in time.

The executor stays sans-I/O: when step 3 (``peer/delegated.py``) refuses
for a stale status, it *parks* the invoke here and emits
:class:`FetchStatus` for the keys not already being asked about; the edge
(``net/delegation.py``) asks the publisher, stores each answer in the
verifier's status cache, and reports every key it was given back with
``Executor.status_settled(key, now)``, answered or failed. An invoke whose
keys have all settled is handled again from the start; it is never parked
twice, so a status still missing then (publisher unreachable, timed out)
is the 5002 it would have had. Invokes needing one status share one
query: a key already asked about is not asked again.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import msgspec

__all__ = ["FetchStatus", "Parked", "StatusWaits", "Key"]

Key = tuple[str, str]  # (delegator, delegation_id)


class FetchStatus(msgspec.Struct, frozen=True):
    """Action: ask the revocation publisher about ``keys`` now, and report
    each (answered or not) with ``Executor.status_settled``."""

    keys: tuple[Key, ...]


class Parked(msgspec.Struct):
    """One invoke message waiting for statuses (``waiting``: keys not settled yet)."""

    inbound: Any
    conn: Hashable
    waiting: set[Key]


class StatusWaits:
    """The parked invokes, by the status keys they wait for. Bounded: past
    ``max_parked`` an invoke is not parked (it gets its 5002 at once)."""

    def __init__(self, max_parked: int = 10_000) -> None:
        self.max_parked = max_parked
        self._by_key: dict[Key, list[Parked]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def park(self, inbound: Any, conn: Hashable, keys: Sequence[Key]) -> list[FetchStatus] | None:
        """Park ``inbound`` until every key in ``keys`` has settled; the
        action asking for the keys nobody asked about yet (``[]`` when all
        are being asked already). None: not parked (no keys, or full)."""
        wanted = set(keys)
        if not wanted or self._count >= self.max_parked:
            return None
        entry = Parked(inbound, conn, wanted)
        new = tuple(key for key in dict.fromkeys(keys) if key not in self._by_key)
        for key in wanted:
            self._by_key.setdefault(key, []).append(entry)
        self._count += 1
        return [FetchStatus(new)] if new else []

    def settled(self, key: Key) -> list[Parked]:
        """``key`` was asked about: the parked invokes that wait for nothing
        more now, in the order they were parked."""
        ready = []
        for entry in self._by_key.pop(key, ()):
            entry.waiting.discard(key)
            if not entry.waiting:
                ready.append(entry)
        self._count -= len(ready)
        return ready

    def holds(self, conn: Hashable) -> bool:
        """Does an invoke that arrived on ``conn`` wait here? O(parked)."""
        return any(entry.conn == conn for entries in self._by_key.values() for entry in entries)
