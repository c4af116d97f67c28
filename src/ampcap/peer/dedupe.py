"""Idempotency cache for CAP_INVOKE (RFC 001 §16.2, ruling R8).

Keyed by ``(sender DID, message id)``. Each entry remembers a fingerprint
of the signed content (``Inbound.fingerprint``: a hash of Sig_Input, so it
covers every signed header and the body) and one of three things:

* RUNNING: the invocation is executing; the set of connections waiting for
  its outcome (the first delivery's, plus any connection a retry arrived on);
* DONE: the one terminal message (CAP_RESULT, or the ERROR of a rejection)
  as a :class:`Terminal`: its wire bytes, exactly as first sent, and when
  that message expires. A later retry gets those bytes again (ruling R8 as
  amended: same id, ``ts`` and signature, so a client deduplicating by
  message id, RFC 006 §7.2, sees one terminal reply); once the message has
  expired, :meth:`lookup` says EXPIRED and the executor answers 4001;
* FORGOTTEN: it finished, but its terminal message was dropped to stay within
  the memory budget. Only the fingerprint is left, so a retry is still
  recognised and never runs the invocation a second time; it is told the
  result is gone (the executor answers 4001) instead of getting it again.

A message that reuses a known ``(from, id)`` with a different fingerprint is
not a retry: :meth:`lookup` says CONFLICT and never hands out the entry.

Entries live until the message expires (``ts + ttl``); after that the
receive pipeline refuses the message (1003) before it gets here.

When the cache must evict an entry before its message expires, a retry of
that invoke would look new. So the cache also keeps a :class:`Horizon`: per
sender, the newest message-id timestamp among its evicted entries (ids start
with their creation time, RFC 001 §4.2, and a retry repeats the id). A
message not in the cache from that sender, no newer than that and arriving
before the evicted messages expire, may be such a retry: :meth:`lookup` says
UNCERTAIN and the executor refuses it (4001) rather than risk running it
twice. That costs nothing until the cache overflows, and afterwards only
touches a sender's messages older than ones it had forgotten, which a
sender's own retries are and its new messages normally are not.

Memory is bounded twice. Terminal messages are kept as their wire bytes
and their sizes add up to at most ``max_bytes``: beyond it the terminal
that expires soonest is dropped and its entry becomes FORGOTTEN. Without that bound a caller could make the
daemon hold ``max_entries`` results of up to a message's size each (echo a
1 MiB params a hundred thousand times); keeping bytes rather than decoded
values also makes the budget mean what it says. Entries of any kind beyond
``max_entries`` are evicted soonest-expiry first (they were about to go
anyway). RUNNING entries are never evicted: the executor's in-flight limits
bound them, and forgetting one would let a retry run the same invocation
twice. Waiters per entry are bounded too.

A finished entry is a plain ``(fingerprint, expires_at, Terminal or None)``
tuple and the key an untracked struct: a full cache holds one entry per
invoke served, and none of it needs the garbage collector's attention
(CPython stops tracking tuples of untracked values; a Terminal is never
tracked).

The interface a durable journal (ruling R19) builds on is narrow: the
executor calls :meth:`InvokeCache.lookup`, :meth:`start`, :meth:`finish` and
:meth:`remember`, and what is stored per finished invoke is ``(key,
fingerprint, expires_at, Terminal(wire, expires_at))``: bytes and integers.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Hashable

import msgspec

from ..wire.envelope import id_timestamp
from .limits import DeadlineQueue

__all__ = ["InvokeKey", "Terminal", "CacheStatus", "Lookup", "Horizon", "InvokeCache", "ENTRY_OVERHEAD"]

# What a kept terminal costs besides its wire bytes: key, entry tuple,
# Terminal, dict slot and expiry-heap items, rounded up.
ENTRY_OVERHEAD = 512


class InvokeKey(msgspec.Struct, frozen=True, gc=False):
    """``(sender DID, message id)``: hashable, two scalars, never in a cycle."""

    sender: str
    msg_id: bytes


class Terminal(msgspec.Struct, frozen=True, gc=False):
    """An invoke's terminal message as it was first sent."""

    wire: bytes
    """The signed message (unframed), to be sent again byte for byte."""
    expires_at: int
    """Its ``ts + ttl`` (Unix ms): after that it is no longer resent (4001)."""


class CacheStatus(enum.Enum):
    NEW = "new"  # never seen (or forgotten after expiry)
    RUNNING = "running"  # same content, still executing: wait for its outcome
    DONE = "done"  # same content, finished: resend the cached terminal
    EXPIRED = "expired"  # same content, finished, but the terminal message has expired: 4001
    FORGOTTEN = "forgotten"  # same content, finished, terminal dropped for memory: never run again
    CONFLICT = "conflict"  # same (from, id), different content: 4001, reveal nothing
    UNCERTAIN = "uncertain"  # not remembered, but may retry an evicted invoke: never run


class Lookup(msgspec.Struct, frozen=True):
    status: CacheStatus
    terminal: Terminal | None = None  # only for DONE


class _Running(msgspec.Struct):
    fingerprint: bytes
    expires_at: int
    waiters: list[Hashable] = msgspec.field(default_factory=list)  # ordered, no repeats


# (fingerprint, expires_at, the terminal as sent, or None once forgotten)
_Finished = tuple[bytes, int, Terminal | None]
_NEW, _RUNNING, _CONFLICT = Lookup(CacheStatus.NEW), Lookup(CacheStatus.RUNNING), Lookup(CacheStatus.CONFLICT)
_FORGOTTEN, _UNCERTAIN = Lookup(CacheStatus.FORGOTTEN), Lookup(CacheStatus.UNCERTAIN)
_EXPIRED = Lookup(CacheStatus.EXPIRED)


class Horizon:
    """How far back the cache can no longer tell a retry from a new invoke.

    Per sender, ``(newest id timestamp, latest expiry)`` of the entries
    evicted before they expired. Bounded by ``max_senders``: the sender
    updated least recently is folded into one horizon that covers every
    sender, so a flood of fresh identities makes the daemon more cautious,
    never forgetful. A horizon lapses once everything it covers has expired.
    """

    def __init__(self, max_senders: int = 10_000) -> None:
        if max_senders < 1:
            raise ValueError("max_senders must be positive")
        self.max_senders = max_senders
        self._senders: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._everyone: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self._senders)

    def forget(self, key: InvokeKey, expires_at: int, now_ms: int) -> None:
        """``key``'s entry was evicted; its message lives until ``expires_at``."""
        self._senders[key.sender] = _widen(self._senders.pop(key.sender, None), (id_timestamp(key.msg_id), expires_at))
        while len(self._senders) > self.max_senders:
            _, oldest = self._senders.popitem(last=False)
            if oldest[1] >= now_ms:  # a lapsed one covers nothing any more
                self._everyone = _widen(self._everyone, oldest)

    def covers(self, key: InvokeKey, now_ms: int) -> bool:
        """Could ``key`` be a retry of an evicted invoke?"""
        ts = id_timestamp(key.msg_id)
        mine = self._senders.get(key.sender)
        if mine is not None:
            if now_ms > mine[1]:
                del self._senders[key.sender]
            elif ts <= mine[0]:
                return True
        every = self._everyone
        if every is not None:
            if now_ms > every[1]:
                self._everyone = None
            elif ts <= every[0]:
                return True
        return False


def _widen(horizon: tuple[int, int] | None, more: tuple[int, int]) -> tuple[int, int]:
    """A horizon ``(newest id timestamp, latest expiry)`` that also covers ``more``."""
    return more if horizon is None else (max(horizon[0], more[0]), max(horizon[1], more[1]))


class InvokeCache:
    def __init__(self, *, max_entries: int = 100_000, max_bytes: int = 64 * 1024 * 1024,
                 max_waiters: int = 16, max_senders: int = 10_000) -> None:
        if max_entries < 1 or max_waiters < 1 or max_bytes < 1:
            raise ValueError("cache bounds must be positive")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_waiters = max_waiters
        self._entries: dict[InvokeKey, _Running | _Finished] = {}
        self._expiry: DeadlineQueue[InvokeKey] = DeadlineQueue()  # finished entries: the evictable ones
        self._kept: DeadlineQueue[InvokeKey] = DeadlineQueue()  # finished entries still holding a terminal
        self._bytes = 0  # ENTRY_OVERHEAD + encoded body size of every kept terminal
        self.evicted = 0  # entries dropped for max_entries
        self.forgotten = 0  # terminals dropped for max_bytes
        self.horizon = Horizon(max_senders)  # what evictions left uncertain

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def kept_bytes(self) -> int:
        """What the kept terminals cost, as counted against ``max_bytes``."""
        return self._bytes

    def lookup(self, key: InvokeKey, fingerprint: bytes, now_ms: int) -> Lookup:
        self._purge(now_ms)
        entry = self._entries.get(key)
        if entry is None:
            return _UNCERTAIN if self.evicted and self.horizon.covers(key, now_ms) else _NEW
        if isinstance(entry, _Running):
            return _RUNNING if entry.fingerprint == fingerprint else _CONFLICT
        done_fingerprint, _, kept = entry
        if done_fingerprint != fingerprint:
            return _CONFLICT
        if kept is None:
            return _FORGOTTEN
        if now_ms > kept.expires_at:  # the same rule as the receiver's 1003
            return _EXPIRED
        return Lookup(CacheStatus.DONE, kept)

    def start(self, key: InvokeKey, fingerprint: bytes, conn: Hashable, *, expires_at: int) -> None:
        """Record an accepted invocation as RUNNING, with ``conn`` waiting."""
        if key in self._entries:
            raise RuntimeError(f"invocation {key} is already cached")  # the executor looks up first
        self._entries[key] = _Running(fingerprint, expires_at, [conn])

    def add_waiter(self, key: InvokeKey, conn: Hashable) -> bool:
        """Let ``conn`` receive the outcome too. True when it now waits or
        already did (either way the outcome will reach it); False when the
        waiter bound is reached (a flood of retries gains nothing): the
        caller must answer that retry itself."""
        entry = self._entries[key]
        if not isinstance(entry, _Running):
            raise RuntimeError("add_waiter on a finished invocation")
        if conn in entry.waiters:
            return True
        if len(entry.waiters) >= self.max_waiters:
            return False
        entry.waiters.append(conn)
        return True

    def waiters(self, key: InvokeKey) -> tuple[Hashable, ...]:
        entry = self._entries.get(key)
        return tuple(entry.waiters) if isinstance(entry, _Running) else ()

    def drop_waiter(self, conn: Hashable) -> None:
        """A connection closed: nobody can hear it any more. O(running)."""
        for entry in self._entries.values():
            if isinstance(entry, _Running) and conn in entry.waiters:
                entry.waiters.remove(conn)

    def finish(self, key: InvokeKey, terminal: Terminal, now_ms: int) -> tuple[Hashable, ...]:
        """RUNNING → DONE; return the connections to send ``terminal`` to."""
        entry = self._entries[key]
        if not isinstance(entry, _Running):
            raise RuntimeError(f"invocation {key} finished twice")
        # A job may outlive its message; keep the result a little so that a
        # retry racing the completion still finds it, and stay evictable.
        self._keep(key, entry.fingerprint, max(entry.expires_at, now_ms), terminal, now_ms)
        return tuple(entry.waiters)

    def withdraw(self, key: InvokeKey) -> tuple[Hashable, ...]:
        """RUNNING → unknown: the job never started (a retry may run it).
        Returns the connections waiting for it."""
        entry = self._entries.get(key)
        if not isinstance(entry, _Running):
            return ()
        del self._entries[key]
        return tuple(entry.waiters)

    def remember(self, key: InvokeKey, fingerprint: bytes, terminal: Terminal, *, expires_at: int,
                 now_ms: int) -> None:
        """Store the terminal ERROR of an invocation rejected before execution."""
        self._purge(now_ms)
        if key in self._entries or expires_at < now_ms:
            return
        self._keep(key, fingerprint, expires_at, terminal, now_ms)

    def restore(self, key: InvokeKey, fingerprint: bytes, terminal: Terminal, *, expires_at: int,
                now_ms: int) -> None:
        """A finished invocation read back from the journal after a restart
        (R19): DONE, with the terminal message's bytes as first sent."""
        self.remember(key, fingerprint, terminal, expires_at=expires_at, now_ms=now_ms)

    def _keep(self, key: InvokeKey, fingerprint: bytes, expires_at: int, terminal: Terminal, now_ms: int) -> None:
        self._entries[key] = (fingerprint, expires_at, terminal)
        self._bytes += ENTRY_OVERHEAD + len(terminal.wire)
        self._expiry.set(key, expires_at)
        self._kept.set(key, expires_at)
        self._bound(now_ms)

    def _purge(self, now_ms: int) -> None:
        # Entries expire strictly after ts + ttl, matching the pipeline's 1003 rule.
        for key in self._expiry.pop_due(now_ms - 1):
            self._drop(key)

    def _drop(self, key: InvokeKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and not isinstance(entry, _Running):
            self._unkeep(key, entry[2])

    def _unkeep(self, key: InvokeKey, kept: Terminal | None) -> None:
        if kept is not None:
            self._bytes -= ENTRY_OVERHEAD + len(kept.wire)
            self._kept.discard(key)

    def _bound(self, now_ms: int) -> None:
        while self._bytes > self.max_bytes:
            key = self._kept.pop_earliest()
            if key is None:  # pragma: no cover - _bytes counts exactly the kept terminals
                break
            entry = self._entries[key]
            assert not isinstance(entry, _Running)  # only finished entries keep a terminal
            fingerprint, expires_at, kept = entry
            self._unkeep(key, kept)
            self._entries[key] = (fingerprint, expires_at, None)
            self.forgotten += 1
        while len(self._entries) > self.max_entries:
            key = self._expiry.pop_earliest()
            if key is None:
                return  # only RUNNING entries left: bounded by the in-flight limits
            entry = self._entries[key]
            assert not isinstance(entry, _Running)  # only finished entries are evictable
            self.horizon.forget(key, entry[1], now_ms)
            self._drop(key)
            self.evicted += 1
