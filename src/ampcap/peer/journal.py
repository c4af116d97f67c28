"""The executor's invoke journal, as the sans-I/O core sees it (ruling R19).

The idempotency cache (:mod:`.dedupe`) makes a retry safe while the daemon
lives; the journal makes it safe across a restart. The executor never
touches a disk: when it is built with ``journal=True`` it emits a
:class:`Persist` action beside the effects that depend on it, and the edge
(``net/daemon/core.py`` over ``store/journal.py``) commits the record *before*
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

The journal is the record, memory a bounded cache in front of it (R25): at
start-up the edge hands back only the RUNNING records
(:meth:`Executor.preload`), and an invoke the cache cannot place (it may have
been seen before the restart, or evicted since) is looked up through the
synchronous :class:`InvokeRecords` the executor is handed: one primary-key
read (~10 µs on SQLite), asked only on such misses, never for a plain new
invoke. A RUNNING one was interrupted by the restart, and its
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

__all__ = ["JournalState", "JournalRecord", "Persist", "InvokeJournal", "InvokeRecords", "InvokeClaims", "ClaimStatus",
           "Claim", "INTERRUPTED", "after_restart", "interrupted"]

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
    # The claim (R25): which worker runs a RUNNING invoke, and until when its
    # lease holds; None/0 for a process that owns its store alone.
    owner: str | None = None
    lease_until: int = 0
    session: dict[str, Any] | None = None  # the invoke's body.session: a session-scoped reply carries it

    def __post_init__(self) -> None:
        if (self.state is JournalState.DONE) != (self.terminal is not None):
            raise ValueError("a DONE record holds its terminal message, a RUNNING one none")


class Persist(msgspec.Struct, frozen=True):
    """Action: commit ``records`` before applying the other actions of the same list."""

    records: tuple[JournalRecord, ...]


class InvokeRecords(Protocol):
    """The executor's view of the journal on a cache miss (``ampcap.store.journal.StoreJournal``)."""

    def find(self, key: InvokeKey, now_ms: int) -> JournalRecord | None:
        """``key``'s record unless it expired at ``now_ms``. May raise when
        the store cannot be read (the executor answers 5002: retry)."""
        ...


class InvokeJournal(InvokeRecords, Protocol):
    """What the edge implements (``ampcap.store.journal.StoreJournal``)."""

    def load_running(self, now_ms: int) -> list[JournalRecord]:
        """The RUNNING records not yet expired at ``now_ms`` (what a restart interrupted)."""
        ...

    def write(self, records: Iterable[JournalRecord]) -> None:
        """Insert or replace ``records`` in one atomic commit."""
        ...

    def prune(self, now_ms: int) -> int:
        """Drop records expired at ``now_ms``; return how many."""
        ...


class ClaimStatus(enum.Enum):
    """What claiming an invoke in a shared store found (R25)."""

    CLAIMED = "claimed"  # the row is ours now (new, or already ours): run it
    DONE = "done"  # finished already, by any worker: answer with its terminal bytes
    HELD = "held"  # RUNNING under another worker's live lease: PROCESSING, then wait for DONE
    ABANDONED = "abandoned"  # RUNNING, its worker's lease ran out: interrupted (5002 unless idempotent)
    CONFLICT = "conflict"  # same key, different fingerprint: not a retry (4001)


class Claim(msgspec.Struct, frozen=True):
    status: ClaimStatus
    record: JournalRecord | None = None  # the row as found (None for a fresh claim)


class InvokeClaims(Protocol):
    """A journal several workers share (``ampcap.store.journal.StoreJournal``).

    ``owner`` is a worker's id, ``lease_until`` when its claims lapse unless
    renewed (Unix ms). Every method is one store transaction. The worker
    group's edge calls them around the executor's actions: a claim in place
    of the RUNNING row, :meth:`complete_rows` in place of the DONE one."""

    def claim(self, record: JournalRecord, owner: str, lease_until: int, now_ms: int) -> Claim:
        """Claim ``record``'s invoke (RUNNING) for ``owner``; or say what holds it."""
        ...

    def take_over(self, key: InvokeKey, owner: str, lease_until: int, now_ms: int) -> bool:
        """Claim an ABANDONED invoke (to run an idempotent one again); one taker wins."""
        ...

    def close_abandoned(self, record: JournalRecord, now_ms: int) -> bool:
        """Write an ABANDONED invoke's 5002 (``record``, DONE) unless its row changed hands."""
        ...

    def renew(self, owner: str, lease_until: int) -> int:
        """Extend every lease ``owner`` holds; how many it holds."""
        ...

    def wait_for(self, keys: Iterable[InvokeKey], now_ms: int) -> list[JournalRecord]:
        """The DONE records among ``keys`` (what HELD claims wait for)."""
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
            record, warning = interrupted(record, now_ms, seal)
            if warning is not None:
                warnings.append(warning)
            closed.append(record)
        kept.append(record)
    return kept, closed, warnings


def interrupted(record: JournalRecord, now_ms: int, seal: Callable[[Outbound, int], Terminal]
                ) -> tuple[JournalRecord, str | None]:
    """``record`` (RUNNING, cut short by a restart or by its owner's death)
    closed with CAP_RESULT 5002, sealed once by ``seal``; and a warning when
    that 5002 could not be encrypted (see :func:`after_restart`)."""
    warning = None
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
        warning = (f"interrupted invoke {record.key.msg_id.hex()} from {shown(record.key.sender)}: "
                   f"its 5002 goes unencrypted ({shown(why, MESSAGE_LIMIT)})")
        terminal = seal(msgspec.structs.replace(out, encrypt=False), now_ms)
    return msgspec.structs.replace(record, state=JournalState.DONE, terminal=terminal, owner=None), warning
