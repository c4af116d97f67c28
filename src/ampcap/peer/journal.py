"""The executor's invoke journal, as the sans-I/O core sees it (ruling R19).

The idempotency cache (:mod:`.dedupe`) makes a retry safe while the daemon
lives; the journal makes it safe across a restart. The executor never
touches a disk: when it is built with ``journal=True`` it emits a
:class:`Persist` action beside the effects that depend on it, and the edge
(``net/daemon.py`` over ``store/journal.py``) commits the record *before*
applying any action of that list:

* on accepting an invoke, a RUNNING record before the job starts: a job
  that may have had effects is never forgotten by a crash;
* on ending one, a DONE record holding the terminal message before it is
  sent: a caller can never have seen a reply the journal lacks.

The terminal message is kept as the executor sealed it, once (through its
injected :class:`~ampcap.peer.sealing.Sealer`): a
:class:`~ampcap.peer.dedupe.Terminal`, the signed unframed bytes and their
expiry. A retry after a restart gets those very bytes (R8), authcrypted
replies included (their nonce is random: re-sealing could never repeat them).

At start-up the edge hands the records back (:meth:`Executor.preload`): DONE
ones fill the cache; a RUNNING one was interrupted by the restart, and its
retry is answered 5002 ("interrupted by a restart; retry with a new id")
unless its capability is ``idempotent = true``, which runs it again. That
5002 is the reply the job would have got: so a record keeps what a reply
takes from its invoke beyond the key, whether the invoke came authcrypted
(RFC 001 §8.5: its replies are encrypted to the caller too) and its
``thread_id``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Protocol

import msgspec

from .dedupe import InvokeKey, Terminal

__all__ = ["JournalState", "JournalRecord", "Persist", "InvokeJournal"]


class JournalState(enum.Enum):
    RUNNING = "running"  # accepted, executing (or interrupted, after a restart)
    DONE = "done"  # terminal message fixed and (about to be) sent


class JournalRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One invoke as the journal keeps it (keyed by ``key``)."""

    key: InvokeKey
    fingerprint: bytes  # Inbound.fingerprint: a retry must carry the same signed content
    capability_id: str  # the resolved name:version (is it idempotent?)
    state: JournalState
    expires_at: int  # Unix ms after which the record may be dropped
    terminal: Terminal | None = None  # DONE only: the sealed bytes as first sent, and their expiry
    # What a reply copies from the invoke (Executor._reply), for the 5002 a
    # restart seals in place of the terminal reply a RUNNING record never got.
    encrypted: bool = False  # the invoke came authcrypted: so does that 5002
    thread_id: bytes | None = None

    def __post_init__(self) -> None:
        if (self.state is JournalState.DONE) != (self.terminal is not None):
            raise ValueError("a DONE record holds its terminal message, a RUNNING one none")


class Persist(msgspec.Struct, frozen=True):
    """Action: commit ``records`` before applying the other actions of the same list."""

    records: tuple[JournalRecord, ...]


class InvokeJournal(Protocol):
    """What the edge implements (``ampcap.store.journal.SqliteJournal``)."""

    def load(self, now_ms: int) -> list[JournalRecord]:
        """Every record not yet expired at ``now_ms`` (expired ones may be dropped)."""
        ...

    def write(self, records: Iterable[JournalRecord]) -> None:
        """Insert or replace ``records`` in one atomic commit."""
        ...

    def prune(self, now_ms: int) -> int:
        """Drop records expired at ``now_ms``; return how many."""
        ...
