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
(RFC 001 §8.5: its replies are encrypted to the caller too), its
``thread_id`` and its session context (RFC 004 §7.4, RFC 006 §4.4: a reply
to a session-scoped invoke carries the signed ``body.session``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgspec

from ..caps.bodies import result_error
from ..display import MESSAGE_LIMIT, shown
from ..errors import AmpError
from ..wire.cbor import dumps
from ..wire.registry import MessageType
from .dedupe import InvokeKey, Terminal
from .outbound import Outbound

__all__ = ["JournalState", "JournalRecord", "Persist", "InvokeJournal", "INTERRUPTED", "after_restart"]

UNAVAILABLE = 5002
INTERRUPTED = "interrupted by a restart; retry with a new id"


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
    session: dict[str, Any] | None = None  # the invoke's body.session: a session-scoped reply carries it

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


def after_restart(records: Iterable[JournalRecord], now_ms: int, idempotent: Callable[[str], bool],
                  seal: Callable[[Outbound, int], Terminal]
                  ) -> tuple[list[JournalRecord], list[JournalRecord], list[str]]:
    """What the journal's ``records`` mean after a restart (R19), as
    ``(kept, closed, warnings)``: ``kept``, every DONE record the executor's
    cache restores (their retries get the same bytes). Expired records are
    dropped; a RUNNING one was cut short by the restart: unless
    ``idempotent(capability_id)`` (unknown to the cache, its retry runs it
    again), it is closed now with CAP_RESULT 5002 sealed once by ``seal``,
    and is in ``kept`` and in ``closed`` (to write: the next restart keeps
    the same bytes).

    That 5002 is the reply the job would have had: the same ``thread_id``,
    the invoke's ``body.session`` when it had one, and authcrypted to the caller when the invoke was (RFC 001 §8.5).
    Should the caller's key agreement key no longer resolve (a keyring
    edited between the two lives; the invoke was decrypted with it, so it
    did then), the 5002 goes out signed but unencrypted, and ``warnings``
    says so: its body holds nothing of the invoke, and the caller must get
    its one terminal reply (R5) while the invoke must not run again."""
    kept: list[JournalRecord] = []
    closed: list[JournalRecord] = []
    warnings: list[str] = []
    for record in records:
        if record.expires_at < now_ms:
            continue
        if record.state is JournalState.RUNNING:
            if idempotent(record.capability_id):
                continue  # unknown to the cache: its retry runs again
            body = result_error(AmpError(UNAVAILABLE, INTERRUPTED), record.session)
            out = Outbound(typ=int(MessageType.CAP_RESULT), body=body, reply_to=record.key.msg_id,
                           thread_id=record.thread_id, to=record.key.sender, body_cbor=dumps(body),
                           encrypt=record.encrypted)
            try:
                terminal = seal(out, now_ms)
            except Exception as exc:  # the resolver's 3001, or no resolver at all
                if not record.encrypted:
                    raise
                why = exc.message if isinstance(exc, AmpError) else str(exc)
                warnings.append(f"interrupted invoke {record.key.msg_id.hex()} from {shown(record.key.sender)}: "
                                f"its 5002 goes unencrypted ({shown(why, MESSAGE_LIMIT)})")
                terminal = seal(msgspec.structs.replace(out, encrypt=False), now_ms)
            record = msgspec.structs.replace(record, state=JournalState.DONE, terminal=terminal)
            closed.append(record)
        kept.append(record)
    return kept, closed, warnings
