"""The executor's invoke journal over the state store (component ``journal``).

Implements :class:`ampcap.peer.journal.InvokeJournal` and the executor's
lookup (:class:`ampcap.peer.journal.InvokeRecords`). One row per invoke,
keyed ``(sender, msg_id)`` (RFC 001's idempotency key): the body fingerprint
a retry must match, the capability (is it idempotent?), the state, when the
row may go, whether the invoke came authcrypted, its ``thread_id`` and its
``body.session`` (a restart's 5002 is encrypted, threaded and
session-scoped like any reply to it), and, once
DONE, the terminal message as the executor sealed it (its signed, unframed
bytes and their ``ts + ttl``): a retry after a restart, or after memory
forgot it, gets those very bytes, which is what R8 and R19 ask (an
authcrypted reply could not be sealed again to the same bytes).

The store is the record (R25): memory only caches it. Start-up reads the
RUNNING rows (what a restart must close), never the whole table; a retry
memory cannot place is looked up here (:meth:`SqliteJournal.find`, one
primary-key read).

Claims (R25): a RUNNING row also names its ``owner`` (a worker's id) and the
``lease_until`` its owner keeps pushing forward while it lives
(:meth:`claim`, :meth:`renew`). A duplicate meeting a live claim of another
owner waits for the DONE row; a RUNNING row whose lease ran out was cut
short like an invoke a restart interrupted. docs/scaling.md has the design.

Interruptions (:func:`on_interrupted`): a component that ties state of its
own to an invoke (a paid call's spent payment, store/payments.py) is told,
inside the very transaction that closes an interrupted invoke with its
5002, which invokes those are: a restart's closures, an abandoned claim
closed by another worker. So what the component undoes and the 5002 commit
together or not at all.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from ..peer.dedupe import InvokeKey, Terminal
from ..peer.journal import Claim, ClaimStatus, JournalRecord, JournalState
from ..wire.cbor import DecodeLimits, dumps, loads
from .database import StateStore, Transaction

__all__ = ["SqliteJournal", "StoreJournal", "ClaimStatus", "Claim", "VERSION", "DONE_CHANNEL", "on_interrupted",
           "InterruptionHook"]

InterruptionHook = Callable[[Transaction, list[InvokeKey]], Any]
"""Called with the transaction closing interrupted invokes, and their keys."""
_HOOKS: "weakref.WeakKeyDictionary[StateStore, dict[str, InterruptionHook]]" = weakref.WeakKeyDictionary()


def on_interrupted(store: StateStore, name: str, hook: InterruptionHook) -> None:
    """Have ``hook(db, keys)`` run in every transaction of this store's
    journal that closes invokes cut short (a restart, a dead worker's claim)
    with their 5002; ``name`` (a component's) replaces an earlier hook of the
    same name."""
    _HOOKS.setdefault(store, {})[name] = hook


def _interrupted(store: StateStore, db: Transaction, keys: list[InvokeKey]) -> None:
    hooks = _HOOKS.get(store)
    if hooks and keys:
        for hook in hooks.values():
            hook(db, keys)

# Version 2 added ``encrypted`` and ``thread_id``: what the 5002 that closes
# an interrupted invoke at restart copies from it (peer/journal.py). A
# version-1 row lacks them: it reads as a plain invoke without a thread, which
# is how version 1 answered it. Version 3 added the claim (``owner``,
# ``lease_until``) and dropped SQLite's WITHOUT ROWID (the table is rebuilt:
# the same rows in portable SQL, so one schema history serves PostgreSQL too).
#
# Version 4 added ``session``: the invoke's ``body.session`` (CBOR), which a
# reply to a session-scoped invoke carries (RFC 004 §7.4, RFC 006 §4.4). An
# older row lacks it: its 5002 goes without, as those versions sent it.
VERSION = 4
_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
        sender TEXT NOT NULL,
        msg_id BLOB NOT NULL,
        fingerprint BLOB NOT NULL,
        capability TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'done')),
        expires_at INTEGER NOT NULL,
        wire BLOB,
        wire_expires_at INTEGER,
        encrypted INTEGER NOT NULL DEFAULT 0,
        thread_id BLOB,
        owner TEXT,
        lease_until INTEGER NOT NULL DEFAULT 0,{session}
        PRIMARY KEY (sender, msg_id)
    )"""
_SCHEMA = (
    _TABLE.format(name="invoke_journal", session="\n        session BLOB,"),
    "CREATE INDEX IF NOT EXISTS invoke_journal_expiry ON invoke_journal (expires_at)",
    "CREATE INDEX IF NOT EXISTS invoke_journal_running ON invoke_journal (state, lease_until)",
)
_V2 = "sender, msg_id, fingerprint, capability, state, expires_at, wire, wire_expires_at, encrypted, thread_id"
_MIGRATIONS = {
    1: ("ALTER TABLE invoke_journal ADD COLUMN encrypted INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE invoke_journal ADD COLUMN thread_id BLOB"),
    2: (_TABLE.format(name="invoke_journal_v3", session=""),  # version 3's shape: 3 -> 4 adds the column
        f"INSERT INTO invoke_journal_v3 ({_V2}) SELECT {_V2} FROM invoke_journal",
        "DROP TABLE invoke_journal",
        "ALTER TABLE invoke_journal_v3 RENAME TO invoke_journal"),
    3: ("ALTER TABLE invoke_journal ADD COLUMN session BLOB",),
}
_COLUMNS = _V2 + ", owner, lease_until, session"
_UPSERT = (f"INSERT INTO invoke_journal ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
           "ON CONFLICT (sender, msg_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
           "capability = excluded.capability, state = excluded.state, expires_at = excluded.expires_at, "
           "wire = excluded.wire, wire_expires_at = excluded.wire_expires_at, encrypted = excluded.encrypted, "
           "thread_id = excluded.thread_id, owner = excluded.owner, lease_until = excluded.lease_until, "
           "session = excluded.session")
_CLAIM = f"INSERT INTO invoke_journal ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) " \
         "ON CONFLICT (sender, msg_id) DO NOTHING"
DONE_CHANNEL = "ampcap_invoke_done"
"""PostgreSQL NOTIFY channel a completion is announced on (payload: sender, space, msg_id hex)."""


def _record(row: tuple[Any, ...]) -> JournalRecord:
    (sender, msg_id, fingerprint, capability, state, expires_at, wire, wire_expires_at, encrypted, thread_id,
     owner, lease_until, session) = row
    terminal = Terminal(bytes(wire), wire_expires_at) if wire is not None else None
    return JournalRecord(key=InvokeKey(sender, bytes(msg_id)), fingerprint=bytes(fingerprint),
                         capability_id=capability, state=JournalState(state), expires_at=expires_at,
                         terminal=terminal, encrypted=bool(encrypted),
                         thread_id=bytes(thread_id) if thread_id is not None else None,
                         owner=owner, lease_until=int(lease_until), session=_session(session))


def _row(r: JournalRecord) -> tuple[Any, ...]:
    return (r.key.sender, r.key.msg_id, r.fingerprint, r.capability_id, r.state.value, r.expires_at,
            *((r.terminal.wire, r.terminal.expires_at) if r.terminal is not None else (None, None)),
            int(r.encrypted), r.thread_id, r.owner, r.lease_until,
            dumps(r.session) if r.session is not None else None)


class StoreJournal:
    """The journal on either backend (the name ``SqliteJournal`` stays for the SQLite-era callers)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema("journal", VERSION, _SCHEMA, _MIGRATIONS)

    # ------------------------------------------------------------ records

    def load(self, now_ms: int) -> list[JournalRecord]:
        """Every live row: for tools and tests only; a daemon never loads the table."""
        self.prune(now_ms)
        return [_record(row) for row in self.store.query(f"SELECT {_COLUMNS} FROM invoke_journal")]

    def load_running(self, now_ms: int, *, lease_expired_before: int | None = None) -> list[JournalRecord]:
        """The RUNNING rows a start-up must close (R19): all of them for a
        process that owns the store alone (a restart interrupted every one),
        only those whose lease ran out before ``lease_expired_before`` for a
        worker joining a live group (the others are its peers' work)."""
        self.prune(now_ms)
        if lease_expired_before is None:
            rows = self.store.query(f"SELECT {_COLUMNS} FROM invoke_journal WHERE state = 'running'")
        else:
            rows = self.store.query(f"SELECT {_COLUMNS} FROM invoke_journal WHERE state = 'running' "
                                    "AND lease_until < ?", (lease_expired_before,))
        return [_record(row) for row in rows]

    def latest_expiry(self) -> int | None:
        """When the last row expires (None: empty): how long a retry of an
        earlier life's invoke may still arrive."""
        rows = self.store.query("SELECT MAX(expires_at) FROM invoke_journal")
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def find(self, key: InvokeKey, now_ms: int) -> JournalRecord | None:
        """The row of ``key``, unless it expired (InvokeRecords, for the executor)."""
        rows = self.store.query(f"SELECT {_COLUMNS} FROM invoke_journal WHERE sender = ? AND msg_id = ? "
                                "AND expires_at >= ?", (key.sender, key.msg_id, now_ms))
        return _record(rows[0]) if rows else None

    def write_rows(self, db: Transaction, records: Iterable[JournalRecord]) -> None:
        """Within a transaction the caller holds (the daemon's batch)."""
        rows = [_row(r) for r in records]
        if rows:
            db.executemany(_UPSERT, rows)

    def add_rows(self, db: Transaction, records: Iterable[JournalRecord], now_ms: int) -> None:
        """Write DONE ``records`` a worker did not claim (its rejections, the
        5002 of an abandoned invoke) where the key has no row yet, or a
        ``running`` row whose lease ran out; another worker's live claim or
        answer of the same key stands."""
        for r in records:
            assert r.terminal is not None
            if db.execute(_CLAIM, _row(r)).rowcount == 1:
                continue
            if db.execute("UPDATE invoke_journal SET state = 'done', wire = ?, wire_expires_at = ?, expires_at = ?, "
                          "owner = NULL WHERE sender = ? AND msg_id = ? AND fingerprint = ? AND state = 'running' "
                          "AND lease_until < ?", (r.terminal.wire, r.terminal.expires_at, r.expires_at, r.key.sender,
                                                  r.key.msg_id, r.fingerprint, now_ms)).rowcount:
                _interrupted(self.store, db, [r.key])  # its worker died: what it ran is not done
                self.store.notify(db, DONE_CHANNEL, r.key.sender + " " + r.key.msg_id.hex())

    def write(self, records: Iterable[JournalRecord]) -> None:
        with self.store.transaction() as db:
            self.write_rows(db, records)

    def interrupted(self, db: Transaction, keys: list[InvokeKey]) -> None:
        """Within the caller's transaction that closes ``keys`` as cut short
        (the drain's 5002s): tell the :func:`on_interrupted` hooks."""
        _interrupted(self.store, db, keys)

    def close_interrupted(self, records: Iterable[JournalRecord]) -> None:
        """Write the 5002 of invokes a restart interrupted (DONE ``records``)
        and, in the same transaction, tell the :func:`on_interrupted` hooks."""
        records = list(records)
        with self.store.transaction() as db:
            self.write_rows(db, records)
            _interrupted(self.store, db, [r.key for r in records])

    def prune(self, now_ms: int) -> int:
        with self.store.transaction() as db:
            count: int = db.execute("DELETE FROM invoke_journal WHERE expires_at < ?", (now_ms,)).rowcount
        return count

    # ------------------------------------------------------------- claims

    def claim(self, record: JournalRecord, owner: str, lease_until: int, now_ms: int) -> Claim:
        """Claim ``record``'s invoke (a RUNNING record) for ``owner`` until
        ``lease_until``, in one transaction: a new key is inserted; our own
        RUNNING row (a retry) stays ours; any other row is reported as it is."""
        mine = msgspec.structs.replace(record, state=JournalState.RUNNING, terminal=None, owner=owner,
                                       lease_until=lease_until)
        with self.store.transaction() as db:
            if db.execute(_CLAIM, _row(mine)).rowcount == 1:
                return Claim(ClaimStatus.CLAIMED)
            row = db.execute(f"SELECT {_COLUMNS} FROM invoke_journal WHERE sender = ? AND msg_id = ?",
                             (record.key.sender, record.key.msg_id)).fetchone()
        if row is None:  # pruned between the two statements: it expired, and so has the message
            return self.claim(record, owner, lease_until, now_ms)
        return _classify(_record(row), record, owner, now_ms)

    def claim_many(self, records: list[JournalRecord], owner: str, lease_until: int, now_ms: int) -> list[Claim]:
        """:meth:`claim` for a batch, in one transaction: one multi-row
        insert (a round trip per 256 records on PostgreSQL) says which keys
        are new; only the others (duplicates: rare) are read back."""
        mine = [msgspec.structs.replace(r, state=JournalState.RUNNING, terminal=None, owner=owner,
                                        lease_until=lease_until) for r in records]
        won: set[tuple[str, bytes]] = set()
        found: dict[tuple[str, bytes], tuple[Any, ...] | None] = {}
        with self.store.transaction() as db:
            for start in range(0, len(mine), _CHUNK):
                chunk = mine[start:start + _CHUNK]
                sql = (f"INSERT INTO invoke_journal ({_COLUMNS}) VALUES {', '.join([_ROW_MARKS] * len(chunk))} "
                       "ON CONFLICT (sender, msg_id) DO NOTHING RETURNING sender, msg_id")
                won.update((sender, bytes(msg_id)) for sender, msg_id in
                           db.execute(sql, [value for r in chunk for value in _row(r)]).fetchall())
            for r in mine:
                key = (r.key.sender, r.key.msg_id)
                if key not in won:
                    found[key] = db.execute(f"SELECT {_COLUMNS} FROM invoke_journal WHERE sender = ? AND msg_id = ?",
                                            key).fetchone()
        claims = []
        for r in mine:
            key = (r.key.sender, r.key.msg_id)
            if key in won:
                claims.append(Claim(ClaimStatus.CLAIMED))
                continue
            row = found[key]
            claims.append(self.claim(r, owner, lease_until, now_ms) if row is None  # pruned meanwhile
                          else _classify(_record(row), r, owner, now_ms))
        return claims

    def take_over(self, key: InvokeKey, owner: str, lease_until: int, now_ms: int) -> bool:
        """Claim an ABANDONED row (an idempotent invoke to run again): only one
        of the processes that found it abandoned wins."""
        with self.store.transaction() as db:
            won: int = db.execute("UPDATE invoke_journal SET owner = ?, lease_until = ? WHERE sender = ? "
                                  "AND msg_id = ? AND state = 'running' AND (owner IS NULL OR owner = ? "
                                  "OR lease_until < ?)",
                                  (owner, lease_until, key.sender, key.msg_id, owner, now_ms)).rowcount
        return won == 1

    def close_abandoned(self, record: JournalRecord, now_ms: int) -> bool:
        """Write ``record`` (DONE: the 5002 of an ABANDONED invoke) unless the
        row has changed hands meanwhile (its owner came back, or another
        process closed it first: then read it again)."""
        assert record.terminal is not None
        with self.store.transaction() as db:
            closed: int = db.execute(
                "UPDATE invoke_journal SET state = 'done', wire = ?, wire_expires_at = ?, expires_at = ?, "
                "owner = NULL WHERE sender = ? AND msg_id = ? AND state = 'running' AND lease_until < ?",
                (record.terminal.wire, record.terminal.expires_at, record.expires_at, record.key.sender,
                 record.key.msg_id, now_ms)).rowcount
            if closed:
                _interrupted(self.store, db, [record.key])
                self.store.notify(db, DONE_CHANNEL, record.key.sender + " " + record.key.msg_id.hex())
        return closed == 1

    def complete_rows(self, db: Transaction, records: Iterable[JournalRecord], owner: str) -> list[InvokeKey]:
        """Write DONE ``records`` of ``owner``'s claims within the caller's
        transaction, each only while the claim is still ``owner``'s; returns
        the keys whose claim was lost (their lease ran out and another
        process closed or took them: the store's row is the answer). Other
        processes waiting on a key are told (NOTIFY on PostgreSQL)."""
        records = list(records)
        done: set[tuple[str, bytes]] = set()
        # One multi-row UPDATE per 256 records (a round trip each on
        # PostgreSQL), not one statement per record.
        for start in range(0, len(records), _CHUNK):
            chunk = records[start:start + _CHUNK]
            params: list[Any] = []
            for r in chunk:
                assert r.terminal is not None
                params += (r.key.sender, r.key.msg_id, r.terminal.wire, r.terminal.expires_at, r.expires_at)
            params.append(owner)
            sql = ("UPDATE invoke_journal SET state = 'done', wire = v.column3, wire_expires_at = v.column4, "
                   f"expires_at = v.column5, owner = NULL FROM (VALUES {', '.join(['(?, ?, ?, ?, ?)'] * len(chunk))}) "
                   "AS v WHERE invoke_journal.sender = v.column1 AND invoke_journal.msg_id = v.column2 "
                   "AND invoke_journal.owner = ? RETURNING sender, msg_id")
            done.update((sender, bytes(msg_id)) for sender, msg_id in db.execute(sql, params).fetchall())
        if done:  # one wake-up per batch for the workers waiting on any of them
            self.store.notify(db, DONE_CHANNEL, "")
        return [r.key for r in records if (r.key.sender, r.key.msg_id) not in done]

    def renew(self, owner: str, lease_until: int) -> int:
        """Push ``owner``'s leases forward (every RUNNING row it holds, in one
        statement); returns how many it still holds."""
        with self.store.transaction() as db:
            count: int = db.execute("UPDATE invoke_journal SET lease_until = ? WHERE owner = ? AND state = 'running'",
                                    (lease_until, owner)).rowcount
        return count

    def wait_for(self, keys: Iterable[InvokeKey], now_ms: int) -> list[JournalRecord]:
        """The DONE rows among ``keys`` (a worker polling for the claims it
        answered HELD; on PostgreSQL a NOTIFY on :data:`DONE_CHANNEL` says
        when to look)."""
        done = []
        for key in keys:
            found = self.find(key, now_ms)
            if found is not None and found.state is JournalState.DONE:
                done.append(found)
        return done


SqliteJournal = StoreJournal
_CHUNK = 256  # records per multi-row statement (SQLite allows 32,766 parameters; 13 a row)
_ROW_MARKS = "(" + ", ".join(["?"] * 13) + ")"


def _classify(found: JournalRecord, record: JournalRecord, owner: str, now_ms: int) -> Claim:
    """What a claim of ``record`` that met the row ``found`` means (see :meth:`StoreJournal.claim`)."""
    if found.fingerprint != record.fingerprint:
        return Claim(ClaimStatus.CONFLICT, found)
    if found.state is JournalState.DONE:
        return Claim(ClaimStatus.DONE, found)
    if found.owner == owner:
        return Claim(ClaimStatus.CLAIMED, found)
    if found.lease_until >= now_ms:
        return Claim(ClaimStatus.HELD, found)
    return Claim(ClaimStatus.ABANDONED, found)


_OWN = DecodeLimits()  # rows this component wrote


def _session(value: bytes | memoryview | None) -> dict[str, Any] | None:
    """A row's ``session`` column: the map it was written from (None for a
    row without one, or one that is not a map: then the 5002 goes without)."""
    if value is None:
        return None
    decoded = loads(bytes(value), _OWN)
    return decoded if type(decoded) is dict else None
