"""The daemon's durable state at the edge (ruling R19): restoring the invoke
journal and the session records at start, and the batches that commit what
the core asks to keep before its effects happen.

The executor emits ``Persist`` (journal records), the session provider
``SaveSession`` (session records), each inside the action list whose
effects depend on them. :meth:`DurableState.hold` keeps such a list whole;
once per event-loop tick :meth:`flush` commits every record collected in one
transaction (plus the checkpoints session-scoped invokes advanced), then
hands the held lists back to the daemon to apply: a job starts only after
its ``running`` row is committed, a terminal reply leaves only after its
``done`` row. With the store in memory nothing is held (the daemon never
builds a :class:`DurableState`).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from ...caps.catalog import Catalog
from ...display import MESSAGE_LIMIT, shown
from ...peer.actions import Execute
from ...peer.executor import Executor
from ...peer.dedupe import InvokeKey
from ...peer.journal import JournalState, Persist
from ...peer.logthrottle import LogThrottle
from ...session.provider import SaveSession, SessionProvider
from ...store.database import StateStore
from ...store.journal import SqliteJournal
from ...store.sessions import SqliteSessions
from ..transport.clock import Clock

if TYPE_CHECKING:
    from .claims import WorkerClaims
    from .lookahead import ReadAhead

__all__ = ["DurableState", "holds", "after_apply", "applying"]

log = logging.getLogger("ampcap.daemon")

PRUNE_EVERY_MS = 60_000


_AFTER_APPLY: "weakref.WeakKeyDictionary[StateStore, dict[str, Callable[[], None]]]" = weakref.WeakKeyDictionary()


def after_apply(store: StateStore, name: str, hook: Callable[[], None]) -> None:
    """Have ``hook()`` called each time this store's batch has been committed
    and the actions it held applied (the jobs they started, inline ones run):
    the end of a turn of work, where a component may commit what those jobs
    staged, together (the payment workflow: one commit for the turn's steps).
    ``name`` replaces an earlier hook of that name. The hook must not raise."""
    _AFTER_APPLY.setdefault(store, {})[name] = hook


_APPLYING: set[int] = set()  # id() of the stores whose batch is applying now (removed before the hooks run)


def applying(store: StateStore) -> bool:
    """Is this store's batch applying its actions now (its :func:`after_apply` hooks still to run)?"""
    return id(store) in _APPLYING


def holds(actions: list[Any]) -> bool:
    """Does this action list carry records to commit before its effects?"""
    return any(type(action) is Persist or type(action) is SaveSession for action in actions)


class DurableState:
    def __init__(self, store: StateStore, executor: Executor, sessions: SessionProvider, catalog: Catalog,
                 clock: Clock, apply: Callable[[list[Any]], None], throttle: LogThrottle) -> None:
        self.store = store
        self.journal = SqliteJournal(store)
        self.session_store = SqliteSessions(store)
        self._executor = executor
        self._sessions = sessions
        self._clock = clock
        self._apply = apply  # the daemon's: held actions become effects there
        self._throttle = throttle
        self._records: list[Any] = []  # journal records to commit before the held actions
        self._saved: dict[bytes, Any] = {}  # session records, by session id (the latest wins)
        self._held: list[list[Any]] = []  # action lists waiting for that commit
        self._cut_short: set[InvokeKey] = set()  # invokes the drain ended: their DONE rows close them as interrupted
        self._kick = trio.Event()
        self.on_commit: Callable[[float], None] | None = None  # serve --metrics: each batch's commit time
        self._after_apply = _AFTER_APPLY.setdefault(store, {})  # shared: hooks registered later appear in it
        now = clock.wall_ms()
        self._pruned_ms = now
        # The store is the record (R25): only the RUNNING rows are read here
        # (a restart interrupted them); the executor asks the journal for any
        # other invoke its cache cannot place.
        idempotent = lambda cid: bool(getattr(catalog.get(cid), "idempotent", False))  # noqa: E731
        self.claims: WorkerClaims | None = None
        if store.worker_id is not None:  # one worker of a group (R25): claims, and only lapsed rows are ours to close
            from .claims import WorkerClaims

            self.claims = WorkerClaims(self.journal, executor, idempotent, clock, apply, throttle, store.worker_id)
            records = self.journal.load_running(now, lease_expired_before=now)
        else:
            records = self.journal.load_running(now)
        # On PostgreSQL a lookup is a round trip: the edge reads it ahead, in a thread (lookahead.py).
        self.read_ahead: ReadAhead | None = None
        if store.backend == "postgresql":
            from .lookahead import ReadAhead

            self.read_ahead = ReadAhead(self.journal)
        executor.records = self.read_ahead if self.read_ahead is not None else self.journal
        closed, notes = executor.preload(records, now, idempotent, remembered_until=self.journal.latest_expiry())
        if self.claims is not None:
            for record in closed:
                self.journal.close_abandoned(record, now)
        else:
            self.journal.close_interrupted(closed)
        for note in notes:
            throttle.log(log, note.topic or "journal", note.level, clock.monotonic_ms(), "%s", note.message)
        if records:
            log.info("journal: %d invokes interrupted by the restart in %s (%d closed with 5002)", len(records),
                     store.where, len(closed))
        if self.claims is not None:
            sessions.lookup = self.session_store.find  # another worker may have started or changed a session
        kept = self.session_store.load(now)
        self.session_store.write(sessions.preload(kept, now))
        if kept:
            log.info("sessions: %d restored from %s (%d live)", len(kept), store.where,
                     sum(1 for r in sessions.sessions.values() if r.live))

    def hold(self, actions: list[Any]) -> None:
        """Keep ``actions`` until their records are committed."""
        rest = []
        for action in actions:
            if type(action) is Persist:
                self._records.extend(action.records)
            elif type(action) is SaveSession:
                self._saved[action.record.session_id] = action.record
            else:
                rest.append(action)
        self._held.append(rest)
        self._kick.set()

    def cut_short(self, keys: Iterable[InvokeKey]) -> None:
        """The drain ended these running invokes (5002, like a restart): the
        commit that writes their DONE rows also tells the journal's
        interruption hooks (store/journal.py ``on_interrupted``)."""
        self._cut_short.update(keys)

    async def run(self) -> None:
        if self.claims is not None or self.store.keepalive_s is not None:
            async with trio.open_nursery() as nursery:
                if self.claims is not None:
                    nursery.start_soon(self.claims.run)
                if self.store.keepalive_s is not None:
                    nursery.start_soon(self._keep_alive, self.store.keepalive_s)
                await self._commit_loop()
        else:
            await self._commit_loop()

    async def _keep_alive(self, period_s: float) -> None:
        """Touch the store every period (PostgreSQL): a connection the server
        dropped is opened again, and the owner lock taken again with it
        (store/owner.py), within a period rather than at the next invoke,
        so that no uncoordinated daemon finds the store free meanwhile."""
        while True:
            await trio.sleep(period_s)
            try:
                self.store.query("SELECT 1")
            except Exception as exc:
                self._throttle.log(log, "store", logging.ERROR, self._clock.monotonic_ms(),
                                   "state store cannot be reached: %s", shown(exc, MESSAGE_LIMIT))

    async def _commit_loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick = trio.Event()
            # Wake-ups land after every task runnable in this tick has run,
            # so their records share this one commit.
            self.flush()

    def flush(self, *, until_empty: bool = False) -> None:
        """Commit the batch, then apply what waited for it. That may hold
        more (an inline job completes on the spot): the next tick's batch,
        or at once ``until_empty`` (the drain)."""
        while self._held:
            records, held, saved = self._records, self._held, self._saved
            self._records, self._held, self._saved = [], [], {}
            for record in self._sessions.take_dirty():  # checkpoints advanced by invokes, in the same commit
                saved.setdefault(record.session_id, record)
            later: list[list[Any]] = []
            claims = self.claims
            if claims is not None:  # a group's worker: its jobs start only on the claims it won
                records, stopped, later = claims.claim(records)
                if stopped:
                    claims.park([a for actions in held for a in actions
                                 if type(a) is Execute and a.job.key in stopped])
                    held = [[a for a in actions if not (type(a) is Execute and a.job.key in stopped)]
                            for actions in held]
            try:
                started = time.perf_counter()
                with self.store.transaction() as db:
                    if claims is not None:
                        claims.write_rows(db, records, self._clock.wall_ms())
                    else:
                        self.journal.write_rows(db, records)
                    if saved:
                        self.session_store.write_rows(db, saved.values())
                    if self._cut_short:
                        cut = [r.key for r in records if r.key in self._cut_short and r.state is JournalState.DONE]
                        self.journal.interrupted(db, cut)
                        self._cut_short.difference_update(cut)
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - started)
                now = self._clock.wall_ms()
                if now - self._pruned_ms > PRUNE_EVERY_MS:
                    self._pruned_ms = now
                    self.journal.prune(now)
            except Exception as exc:
                if claims is not None:
                    claims.commit_failed()
                # The replies still go out (exactly one per invoke, R5); only
                # their survival of a restart is lost. Loud, and throttled.
                self._throttle.log(log, "journal", logging.ERROR, self._clock.monotonic_ms(),
                                   "state database write failed (replies sent, not journaled): %s",
                                   shown(exc, MESSAGE_LIMIT))
            hooks = self._after_apply
            if not hooks:
                for actions in held:
                    self._apply(actions)
                for actions in later:
                    self._apply(actions)
            else:
                _APPLYING.add(id(self.store))
                try:
                    for actions in held:
                        self._apply(actions)
                    for actions in later:
                        self._apply(actions)
                finally:
                    _APPLYING.discard(id(self.store))
                    for hook in hooks.values():
                        hook()
            if not until_empty:
                return
