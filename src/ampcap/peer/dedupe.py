"""Idempotency cache for CAP_INVOKE (RFC 001 §16.2, ruling R8).

Keyed by ``(sender DID, message id)``. Each entry remembers a fingerprint
of the signed content (``Inbound.fingerprint``: a hash of Sig_Input, so it
covers every signed header and the body) and one of two things:

* RUNNING: the invocation is executing; the set of connections waiting for
  its outcome (the first delivery's, plus any connection a retry arrived on);
* DONE: the one terminal message (CAP_RESULT, or the ERROR of a rejection),
  to be sent again, unchanged, to any later retry.

A message that reuses a known ``(from, id)`` with a different fingerprint is
not a retry: :meth:`lookup` says CONFLICT and never hands out the entry.

Entries live until the message expires (``ts + ttl``); after that the
receive pipeline refuses the message (1003) before it gets here. Memory is
bounded: DONE entries beyond ``max_entries`` are evicted soonest-expiry
first (they were about to go anyway). RUNNING entries are never evicted: the
executor's in-flight limits bound them, and forgetting one would let a retry
run the same invocation twice. Waiters per entry are bounded too.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

from .limits import DeadlineQueue
from .outbound import Outbound

__all__ = ["InvokeKey", "CacheStatus", "Lookup", "InvokeCache"]


class InvokeKey(NamedTuple):
    sender: str
    msg_id: bytes


class CacheStatus(enum.Enum):
    NEW = "new"  # never seen (or forgotten after expiry)
    RUNNING = "running"  # same content, still executing: wait for its outcome
    DONE = "done"  # same content, finished: resend the cached terminal
    CONFLICT = "conflict"  # same (from, id), different content: 4001, reveal nothing


@dataclass(frozen=True, slots=True)
class Lookup:
    status: CacheStatus
    terminal: Outbound | None = None  # only for DONE


@dataclass(slots=True)
class _Entry:
    fingerprint: bytes
    expires_at: int
    waiters: list[Hashable] = field(default_factory=list)  # RUNNING only; ordered, no repeats
    terminal: Outbound | None = None  # set when DONE


class InvokeCache:
    def __init__(self, *, max_entries: int = 100_000, max_waiters: int = 16) -> None:
        if max_entries < 1 or max_waiters < 1:
            raise ValueError("cache bounds must be positive")
        self.max_entries = max_entries
        self.max_waiters = max_waiters
        self._entries: dict[InvokeKey, _Entry] = {}
        self._expiry: DeadlineQueue[InvokeKey] = DeadlineQueue()  # DONE entries only: the evictable ones
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: InvokeKey, fingerprint: bytes, now_ms: int) -> Lookup:
        self._purge(now_ms)
        entry = self._entries.get(key)
        if entry is None:
            return Lookup(CacheStatus.NEW)
        if entry.fingerprint != fingerprint:
            return Lookup(CacheStatus.CONFLICT)
        if entry.terminal is None:
            return Lookup(CacheStatus.RUNNING)
        return Lookup(CacheStatus.DONE, entry.terminal)

    def start(self, key: InvokeKey, fingerprint: bytes, conn: Hashable, *, expires_at: int) -> None:
        """Record an accepted invocation as RUNNING, with ``conn`` waiting."""
        if key in self._entries:
            raise RuntimeError(f"invocation {key} is already cached")  # the executor looks up first
        self._entries[key] = _Entry(fingerprint, expires_at, [conn])

    def add_waiter(self, key: InvokeKey, conn: Hashable) -> bool:
        """Let ``conn`` receive the outcome too; False when it already waits
        or the waiter bound is reached (a flood of retries gains nothing)."""
        entry = self._entries[key]
        if entry.terminal is not None:
            raise RuntimeError("add_waiter on a finished invocation")
        if conn in entry.waiters or len(entry.waiters) >= self.max_waiters:
            return False
        entry.waiters.append(conn)
        return True

    def waiters(self, key: InvokeKey) -> tuple[Hashable, ...]:
        entry = self._entries.get(key)
        return tuple(entry.waiters) if entry is not None else ()

    def drop_waiter(self, conn: Hashable) -> None:
        """A connection closed: nobody can hear it any more. O(running)."""
        for entry in self._entries.values():
            if entry.terminal is None and conn in entry.waiters:
                entry.waiters.remove(conn)

    def finish(self, key: InvokeKey, terminal: Outbound, now_ms: int) -> tuple[Hashable, ...]:
        """RUNNING → DONE; return the connections to send ``terminal`` to."""
        entry = self._entries[key]
        if entry.terminal is not None:
            raise RuntimeError(f"invocation {key} finished twice")
        entry.terminal = terminal
        waiters, entry.waiters = tuple(entry.waiters), []
        # A job may outlive its message; keep the result a little so that a
        # retry racing the completion still finds it, and stay evictable.
        entry.expires_at = max(entry.expires_at, now_ms)
        self._expiry.set(key, entry.expires_at)
        self._bound()
        return waiters

    def remember(self, key: InvokeKey, fingerprint: bytes, terminal: Outbound, *, expires_at: int,
                 now_ms: int) -> None:
        """Store the terminal ERROR of an invocation rejected before execution."""
        self._purge(now_ms)
        if key in self._entries or expires_at < now_ms:
            return
        self._entries[key] = _Entry(fingerprint, expires_at, [], terminal)
        self._expiry.set(key, expires_at)
        self._bound()

    def _purge(self, now_ms: int) -> None:
        # Entries expire strictly after ts + ttl, matching the pipeline's 1003 rule.
        for key in self._expiry.pop_due(now_ms - 1):
            self._entries.pop(key, None)

    def _bound(self) -> None:
        while len(self._entries) > self.max_entries:
            key = self._expiry.pop_earliest()
            if key is None:
                return  # only RUNNING entries left: bounded by the in-flight limits
            self._entries.pop(key, None)
            self.evicted += 1
