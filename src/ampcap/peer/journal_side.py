"""What the executor does with its journal off the hot path (rulings R8,
R19, R25): asking the store about an invoke that memory cannot place (the
store is the record; memory only caches it), ending an invoke another
worker of the group finished or one whose claim could not be taken, and
restoring what the journal kept across a restart.

A base class of :class:`~ampcap.peer.executor.Executor` (as the daemon's
dispatch is of the daemon), so the hot path pays no extra call: the
methods here read the executor's cache, its running invokes and its
collaborators, all named in :class:`_Host`. Nothing here imports the
executor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..caps.bodies import result_error
from ..errors import AmpError
from ..wire.cbor import DecodeLimits
from ..wire.envelope import decode_envelope, id_timestamp
from ..wire.receive import ID_TS_TOLERANCE_MS, MAX_CLOCK_SKEW_MS, Inbound
from ..wire.registry import MessageType
from .actions import Action, Job
from .dedupe import CacheStatus, InvokeCache, InvokeKey, Lookup, Terminal
from .journal import InvokeRecords, JournalRecord, JournalState, Persist, after_restart, interrupted
from .limits import DeadlineQueue, InFlightLimits
from .outbound import Log, Outbound, Send

__all__ = ["JournalSide", "RECALL", "terminal_of", "as_sent"]

UNAVAILABLE = 5002

# Reading back a message we sealed ourselves: a result may be bigger or deeper
# than what we accept from a peer, and it must come back all the same.
OWN_BYTES = DecodeLimits(max_depth=1024, max_items=1 << 62, max_bytes=1 << 62)


class _Host(Protocol):
    """What these methods use of the executor they are part of."""

    records: InvokeRecords | None
    _cache: InvokeCache
    _running: dict[InvokeKey, Any]
    _deadlines: DeadlineQueue[InvokeKey]
    _limits: InFlightLimits
    _recall_until: int | None
    _recall_stop: int
    _idempotent: Callable[[str], bool]
    _seal: Callable[[Outbound, int], Outbound]

    def _may_predate(self, key: InvokeKey, now_ms: int) -> bool: ...

    @staticmethod
    def _reply(job: Job, typ: int, body: dict[str, Any], encoded: bytes | None = None) -> Outbound: ...


class JournalSide:
    """The executor's journal work (see the module docstring)."""

    # Ids up to this timestamp may belong to invokes seen before the start
    # (set by preload), until the last of those messages expires: only they,
    # and what the cache evicted, are looked up in the journal.
    _recall_until: int | None
    _recall_stop: int

    def knows(self: _Host, inbound: Inbound, now_ms: int) -> bool:
        """Has this very invoke been seen (running, done, or a conflict)? Then
        the cache answers it, before any newer check could refuse it."""
        env = inbound.envelope
        key = InvokeKey(env.sender, env.id)
        status = self._cache.lookup(key, inbound.fingerprint, now_ms).status
        if status is CacheStatus.NEW and self.records is not None and self._may_predate(key, now_ms):
            try:
                found = self.records.find(key, now_ms)
            except Exception:
                return False  # handle() answers it (5002)
            return found is not None
        return status is not CacheStatus.NEW

    def may_recall(self: _Host, key: InvokeKey, fingerprint: bytes, now_ms: int) -> bool:
        """Would handling this invoke now read the journal (a cache miss)?
        The edge may read the row ahead, off its event loop, and have
        ``records`` answer from that read (net/daemon/lookahead.py)."""
        if self.records is None:
            return False
        status = self._cache.lookup(key, fingerprint, now_ms).status
        if status is CacheStatus.NEW:
            return self._recall_until is not None and self._may_predate(key, now_ms)
        return status in RECALL

    def _may_predate(self: _Host, key: InvokeKey, now_ms: int) -> bool:
        """Could ``key`` name an invoke seen before this executor started?"""
        until = self._recall_until
        if until is None:
            return False
        if now_ms > self._recall_stop:  # every message from before the start has expired
            self._recall_until = None
            return False
        return id_timestamp(key.msg_id) <= until

    def _recall(self: _Host, key: InvokeKey, fingerprint: bytes, seen: Lookup,
                now_ms: int) -> tuple[Lookup, list[Action]]:
        """What the journal knows of an invoke the cache could not place
        (NEW but possibly older than the start, UNCERTAIN after evictions,
        FORGOTTEN for memory), as the cache would have said it, and the
        actions to put first (a 5002 closing an abandoned invoke, to persist).
        AmpError 5002 when the store cannot be read or another process runs it."""
        assert self.records is not None
        try:
            record = self.records.find(key, now_ms)
        except Exception:
            raise AmpError(UNAVAILABLE, "the state store cannot be read; retry later") from None
        if record is None:
            # The store never had it, or no longer does. A FORGOTTEN entry was
            # finished here: it must not run again (4001).
            return (seen if seen.status is CacheStatus.FORGOTTEN else _NEW_LOOKUP), []
        if record.fingerprint != fingerprint:
            return _CONFLICT_LOOKUP, []
        if record.state is JournalState.DONE:
            assert record.terminal is not None
            if now_ms > record.terminal.expires_at:
                return _EXPIRED_LOOKUP, []
            return Lookup(CacheStatus.DONE, record.terminal), []
        # RUNNING, and not in this executor's memory (it never evicts its own running invokes).
        if record.owner is not None and record.lease_until >= now_ms:
            # Another worker runs it (R25): it takes the path of a new invoke,
            # whose claim finds it held (PROCESSING, then its bytes: peer/claims.py).
            return _NEW_LOOKUP, []
        if self._idempotent(record.capability_id):
            return _NEW_LOOKUP, []  # interrupted; it may run again (its new RUNNING row replaces this one)
        # Interrupted by a restart, or its owner died (its lease ran out): R19's 5002, sealed once.
        closed, warning = interrupted(record, now_ms, lambda out, now: terminal_of(self._seal(out, now)))
        assert closed.terminal is not None
        self._cache.remember(key, fingerprint, closed.terminal, expires_at=closed.expires_at, now_ms=now_ms)
        actions: list[Action] = [Persist((closed,))]
        if warning is not None:
            actions.append(Log(logging.WARNING, warning, "journal"))
        return Lookup(CacheStatus.DONE, closed.terminal), actions

    def settle(self: _Host, key: InvokeKey, terminal: Terminal, now_ms: int) -> list[Action]:
        """End ``key`` with ``terminal``: bytes another worker sealed and the
        shared journal holds (R25, peer/claims.py). Not journaled again."""
        run = self._running.pop(key, None)
        if run is None:
            return []
        self._deadlines.discard(key)
        self._limits.release(run.job.conn)
        return [Send(conn, as_sent(terminal)) for conn in self._cache.finish(key, terminal, now_ms)]

    def withdraw(self: _Host, key: InvokeKey, error: AmpError, now_ms: int) -> list[Action]:
        """Answer ``key`` with the retryable ``error`` and forget it: its job
        never started (a group's store could not be reached to claim it), so
        a retry, here or on another worker, may run it."""
        run = self._running.pop(key, None)
        if run is None:
            return []
        self._deadlines.discard(key)
        self._limits.release(run.job.conn)
        out = self._seal(self._reply(run.job, int(MessageType.CAP_RESULT), result_error(error, run.job.session)),
                         now_ms)
        return [Send(conn, out) for conn in self._cache.withdraw(key)]

    def seal_terminal(self: _Host, out: Outbound, now_ms: int) -> Terminal:
        """``out`` sealed once, as a terminal reply is kept (for a 5002 closing an abandoned claim)."""
        return terminal_of(self._seal(out, now_ms))

    # ----------------------------------------------------------- restart

    def preload(self: _Host, records: list[JournalRecord], now_ms: int, idempotent: Callable[[str], bool], *,
                remembered_until: int | None = None) -> tuple[list[JournalRecord], list[Log]]:
        """Restore what the journal kept across a restart (R19). DONE records
        answer their retries with the same bytes; a RUNNING one was cut
        short by the restart: unless ``idempotent(capability_id)`` (then a
        retry runs it again), it is closed now with CAP_RESULT 5002, sealed
        once here, which the returned records (to write) keep for the next
        restart too (:func:`~ampcap.peer.journal.after_restart` decides, and
        says which 5002 could not be encrypted). Returns those records and
        the lines to log.

        With ``records`` handed to the executor, ``records`` here are only
        the journal's RUNNING ones, and ``remembered_until`` the latest
        expiry among its rows: until then, an invoke whose id is no newer
        than this start is looked up in the journal when the cache does not
        know it (a retry of an invoke seen in an earlier life)."""
        self._idempotent = idempotent
        if remembered_until is not None and remembered_until >= now_ms:
            # A message seen before now has ts <= now + skew and an id within tolerance of its ts.
            self._recall_until = now_ms + MAX_CLOCK_SKEW_MS + ID_TS_TOLERANCE_MS
            self._recall_stop = remembered_until
        kept, closed, warnings = after_restart(records, now_ms, idempotent,
                                               lambda out, now: terminal_of(self._seal(out, now)))
        notes = [Log(logging.WARNING, line, "journal") for line in warnings]
        for record in kept:
            assert record.terminal is not None
            self._cache.restore(record.key, record.fingerprint, record.terminal,
                                expires_at=record.expires_at, now_ms=now_ms)
        return closed, notes


RECALL = (CacheStatus.UNCERTAIN, CacheStatus.FORGOTTEN)  # and NEW, when it may predate the start
_NEW_LOOKUP, _CONFLICT_LOOKUP = Lookup(CacheStatus.NEW), Lookup(CacheStatus.CONFLICT)
_EXPIRED_LOOKUP = Lookup(CacheStatus.EXPIRED)


def terminal_of(out: Outbound) -> Terminal:
    """What the cache keeps of a sealed terminal reply."""
    assert out.wire is not None and out.ts_ms is not None and out.ttl_ms is not None
    return Terminal(out.wire, out.ts_ms + out.ttl_ms)


def as_sent(terminal: Terminal) -> Outbound:
    """A cached terminal, to send again as it is (decoded only to describe it:
    the connection needs its type and ``reply_to``, a log its body)."""
    env = decode_envelope(terminal.wire, OWN_BYTES)
    return Outbound(typ=env.typ, body=env.body, reply_to=env.reply_to, thread_id=env.thread_id, to=env.to,
                    msg_id=env.id, ts_ms=env.ts, ttl_ms=env.ttl, encrypt=env.enc is not None, wire=terminal.wire)
