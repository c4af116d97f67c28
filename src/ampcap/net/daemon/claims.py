"""A worker's claims on a store its group shares (ruling R25), at the edge.

Built by :class:`~.durable.DurableState` when the store names this process
a worker of a group (``store.worker_id``: ``serve --workers``, or machines
given one group token). Alone, a daemon needs none of this: the owner lock
(store/owner.py) keeps every other process out, and its ``running`` rows
are plain upserts batched per tick.

In a group, each ``running`` record the executor asks to persist is claimed
instead (one conditional insert; peer/claims.py says what the answer means):
a job starts only on a claim this worker won. A duplicate that meets
another worker's live claim gets PROCESSING at once and, when that row is
done, the same terminal bytes: this module polls the store for the rows it
waits on (a local read on SQLite; a primary-key read on PostgreSQL, whose
completions also NOTIFY). The worker's leases are renewed, in one
statement, every third of a lease, while it lives: a worker killed with
SIGKILL stops renewing, and its claims are taken as interrupted once their
lease runs out.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterable
from typing import Any

import trio

from ...display import MESSAGE_LIMIT, shown
from ...peer.claims import STORE_DOWN, Verdict, judge
from ...peer.dedupe import InvokeKey
from ...peer.executor import Executor
from ...peer.journal import Claim, ClaimStatus, JournalRecord, JournalState
from ...peer.logthrottle import LogThrottle
from ...store.database import Transaction
from ...store.journal import StoreJournal
from ..transport.clock import Clock

__all__ = ["WorkerClaims", "new_worker_id", "LEASE_MS"]

log = logging.getLogger("ampcap.daemon")

LEASE_MS = int(os.environ.get("AMPCAP_LEASE_MS", "6000"))  # the environment only for the fault tests
POLL_S = 0.05  # how often a duplicate's wait looks at the store
UNWRITTEN_MAX = 100_000
HELD_TEXT = "running in another worker of this daemon"


def new_worker_id() -> str:
    """A claim owner's name: unique per process, readable in the journal."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"


class WorkerClaims:
    def __init__(self, journal: StoreJournal, executor: Executor, idempotent: Callable[[str], bool], clock: Clock,
                 apply: Callable[[list[Any]], None], throttle: LogThrottle, owner: str,
                 lease_ms: int = LEASE_MS) -> None:
        self.journal = journal
        self.owner = owner
        self.lease_ms = lease_ms
        self.conflicts = 0  # claims that met another worker's row (metrics)
        self._executor = executor
        self._idempotent = idempotent
        self._clock = clock
        self._apply = apply
        self._throttle = throttle
        self._mine: set[InvokeKey] = set()  # claims won and not yet completed
        self._silent: set[InvokeKey] = set()  # keys whose DONE record is not this worker's to write
        self._waiting: set[InvokeKey] = set()  # duplicates of another worker's live claim
        self._parked: dict[InvokeKey, Any] = {}  # their jobs (Execute), should their claim's worker die
        self._kick = trio.Event()
        self._attempt: list[JournalRecord] = []  # the batch being written
        self._unwritten: list[JournalRecord] = []  # completions a failed batch did not write

    # --------------------------------------------------------- per batch

    def claim(self, records: list[JournalRecord]) -> tuple[list[JournalRecord], set[InvokeKey], list[list[Any]]]:
        """Claim the ``running`` ones among ``records`` (before their jobs
        start). Returns the other records (to write in the batch), the keys
        whose job must not start, and the action lists to apply after the
        batch's commit (answers, PROCESSING)."""
        rest: list[JournalRecord] = []
        stopped: set[InvokeKey] = set()
        later: list[list[Any]] = []
        now = self._clock.wall_ms()
        running = []
        for record in records:
            if record.state is JournalState.RUNNING:
                running.append(record)
            else:
                rest.append(record)
        if not running:
            return rest, stopped, later
        try:
            claims: list[Claim | None] = list(self.journal.claim_many(running, self.owner, now + self.lease_ms, now))
        except Exception as exc:  # the store is down: nothing ran, the callers may retry
            self._warn("claim", exc)
            claims = [None] * len(running)
        for record, claim in zip(running, claims):
            key = record.key
            try:
                actions = self._refuse(key, now) if claim is None else self._follow(key, claim, now, may_run=True)
            except Exception as exc:
                self._warn("claim", exc)
                actions = self._refuse(key, now)
            if actions is None:
                self._mine.add(key)
            else:
                stopped.add(key)
                later.append(actions)
        return rest, stopped, later

    def park(self, executes: Iterable[Any]) -> None:
        """Keep the jobs (Execute actions) of the invokes that wait on another
        worker's claim: if that worker dies, an idempotent one runs here (R25)."""
        for action in executes:
            if action.job.key in self._waiting:
                self._parked[action.job.key] = action

    def write_rows(self, db: Transaction, records: Iterable[JournalRecord], now_ms: int) -> None:
        """The batch's DONE records: this worker's completions of its claims,
        and its other answers where no other worker's row stands."""
        done: list[JournalRecord] = []
        other: list[JournalRecord] = []
        batch = list(records)
        if self._unwritten:  # a batch the store refused before: this worker's claims stay RUNNING until written
            batch += self._unwritten
            self._unwritten = []
        self._attempt = done
        for record in batch:
            key = record.key
            if key in self._mine:
                self._mine.discard(key)
                done.append(record)
            elif key in self._silent:
                self._silent.discard(key)
            else:
                other.append(record)
        lost = self.journal.complete_rows(db, done, self.owner)
        for key in lost:  # our lease ran out and another worker closed it: its row stands
            log.warning("invoke %s: its claim lapsed before it completed; the store keeps the other answer",
                        key.msg_id.hex())
        self.journal.add_rows(db, other, now_ms)
        self._attempt = []

    def commit_failed(self) -> None:
        """The batch's transaction failed (the store is down): the completions
        of this worker's claims are written with a later batch, or a retry
        would find the invoke RUNNING under this worker's live lease forever.
        Bounded: beyond, the oldest are given up (their rows expire)."""
        for record in self._attempt:
            self._mine.add(record.key)
        self._unwritten = self._attempt[-UNWRITTEN_MAX:]
        self._attempt = []

    # ------------------------------------------------------ what a claim found

    def _follow(self, key: InvokeKey, claim: Claim, now: int, *, may_run: bool) -> list[Any] | None:
        """The actions for ``key`` after ``claim``; None: the job is ours to run."""
        executor = self._executor
        judged = judge(claim, now, self._idempotent if may_run else (lambda _: False), executor.seal_terminal)
        verdict = judged.verdict
        if verdict is Verdict.RUN:
            return None
        self.conflicts += 1
        if verdict is Verdict.TAKE_OVER:
            if self.journal.take_over(key, self.owner, now + self.lease_ms, now):
                return None
            verdict = Verdict.WAIT  # another worker took it first
        if verdict is Verdict.CLOSE:
            assert judged.closed is not None and judged.terminal is not None
            if judged.warning is not None:
                log.warning("%s", judged.warning)
            if self.journal.close_abandoned(judged.closed, now):
                return executor.settle(key, judged.terminal, now)
            found = self.journal.find(key, now)  # closed or taken by another worker meanwhile
            if found is not None and found.terminal is not None:
                return executor.settle(key, found.terminal, now)
            verdict = Verdict.WAIT
        if verdict is Verdict.ANSWER:
            assert judged.terminal is not None
            return executor.settle(key, judged.terminal, now)
        if verdict is Verdict.REFUSE:
            self._silent.add(key)
            return executor.complete(key, error=judged.error, now_ms=now)
        if key not in self._waiting:
            self._waiting.add(key)
            self._kick.set()
            return executor.processing(key, HELD_TEXT, now_ms=now)
        return []

    def _refuse(self, key: InvokeKey, now: int) -> list[Any]:
        """The store is down: 5002, and the invoke is forgotten (it never ran; a retry may run it)."""
        return self._executor.withdraw(key, STORE_DOWN, now)

    # ------------------------------------------------------------ tasks

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._renew)
            nursery.start_soon(self._watch)

    async def _renew(self) -> None:
        while True:
            await trio.sleep(self.lease_ms / 3000)
            try:
                self.journal.renew(self.owner, self._clock.wall_ms() + self.lease_ms)
                if self._unwritten:  # the store is back: what a failed batch left
                    with self.journal.store.transaction() as db:
                        self.write_rows(db, [], self._clock.wall_ms())
            except Exception as exc:
                if self._attempt:
                    self.commit_failed()
                self._warn("lease renewal", exc)

    async def _watch(self) -> None:
        while True:
            if not self._waiting:
                await self._kick.wait()
                self._kick = trio.Event()
                continue
            await trio.sleep(POLL_S)
            now = self._clock.wall_ms()
            for key in list(self._waiting):
                if self._executor.state_of(key) is None:  # answered meanwhile (its deadline, the drain)
                    self._waiting.discard(key)
                    self._parked.pop(key, None)
                    continue
                parked = self._parked.get(key)
                try:
                    found = self.journal.find(key, now)
                    if found is None or (found.state is JournalState.RUNNING and found.lease_until >= now):
                        continue  # still running there (or pruned: the invoke's deadline answers it)
                    status = ClaimStatus.DONE if found.state is JournalState.DONE else ClaimStatus.ABANDONED
                    # Its worker died: an idempotent invoke runs again here if
                    # this worker wins the row (R25), when its job is at hand.
                    actions = self._follow(key, Claim(status, found), now, may_run=parked is not None)
                except Exception as exc:
                    self._warn("wait", exc)
                    continue
                if actions is None:  # taken over: the job is this worker's now
                    assert parked is not None
                    self._waiting.discard(key)
                    del self._parked[key]
                    self._mine.add(key)
                    self._apply([parked])
                    continue
                if self._executor.state_of(key) is None:
                    self._waiting.discard(key)
                    self._parked.pop(key, None)
                if actions:
                    self._apply(actions)

    def _warn(self, what: str, exc: BaseException) -> None:
        self._throttle.log(log, "store", logging.ERROR, self._clock.monotonic_ms(), "state store %s failed: %s",
                           what, shown(exc, MESSAGE_LIMIT))
