"""The executor's invoke journal over the state database (component ``journal``).

Implements :class:`ampcap.peer.journal.InvokeJournal`. One row per accepted
invoke, keyed ``(sender, msg_id)`` (RFC 001's idempotency key): the body
fingerprint a retry must match, the capability (is it idempotent?), the
state, when the row may go, whether the invoke came authcrypted, its
``thread_id`` and its ``body.session`` (a restart's 5002 is encrypted,
threaded and session-scoped like any reply to it), and, once DONE, the terminal message as the
executor sealed it (its signed, unframed bytes and their ``ts + ttl``): a
retry after a restart gets those very bytes, which is what R8 and R19 ask
(an authcrypted reply could not be sealed again to the same bytes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from ..peer.dedupe import InvokeKey, Terminal
from ..peer.journal import JournalRecord, JournalState
from ..wire.cbor import DecodeLimits, dumps, loads
from .database import StateStore

__all__ = ["SqliteJournal", "VERSION"]

# Version 2 added ``encrypted`` and ``thread_id``: what the 5002 that closes
# an interrupted invoke at restart copies from it (peer/journal.py). A
# version-1 row lacks them: it reads as a plain invoke without a thread, which
# is how version 1 answered it.
#
# Version 3 added ``session``: the invoke's ``body.session`` (CBOR), which a
# reply to a session-scoped invoke carries (RFC 004 §7.4, RFC 006 §4.4). A
# version-2 row lacks it: its 5002 goes without, as version 2 sent it.
VERSION = 3
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS invoke_journal (
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
        session BLOB,
        PRIMARY KEY (sender, msg_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS invoke_journal_expiry ON invoke_journal (expires_at)",
)
_MIGRATIONS = {
    1: ("ALTER TABLE invoke_journal ADD COLUMN encrypted INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE invoke_journal ADD COLUMN thread_id BLOB"),
    2: ("ALTER TABLE invoke_journal ADD COLUMN session BLOB",),
}
_COLUMNS = ("sender, msg_id, fingerprint, capability, state, expires_at, wire, wire_expires_at, encrypted, thread_id, session")
_UPSERT = f"INSERT OR REPLACE INTO invoke_journal ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_OWN = DecodeLimits()  # rows this component wrote


class SqliteJournal:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema("journal", VERSION, _SCHEMA, _MIGRATIONS)

    def load(self, now_ms: int) -> list[JournalRecord]:
        self.prune(now_ms)
        records = []
        for (sender, msg_id, fingerprint, capability, state, expires_at, wire, wire_expires_at, encrypted,
             thread_id, session) in self.store.query(f"SELECT {_COLUMNS} FROM invoke_journal"):
            terminal = Terminal(bytes(wire), wire_expires_at) if wire is not None else None
            records.append(JournalRecord(key=InvokeKey(sender, bytes(msg_id)), fingerprint=bytes(fingerprint),
                                         capability_id=capability, state=JournalState(state),
                                         expires_at=expires_at, terminal=terminal, encrypted=bool(encrypted),
                                         thread_id=bytes(thread_id) if thread_id is not None else None,
                                         session=_session(session)))
        return records

    def write_rows(self, db: sqlite3.Connection, records: Iterable[JournalRecord]) -> None:
        """Within a transaction the caller holds (the daemon's batch)."""
        db.executemany(_UPSERT, [(r.key.sender, r.key.msg_id, r.fingerprint, r.capability_id, r.state.value,
                                  r.expires_at, *((r.terminal.wire, r.terminal.expires_at) if r.terminal is not None
                                                  else (None, None)), int(r.encrypted), r.thread_id,
                                  dumps(r.session) if r.session is not None else None)
                                 for r in records])

    def write(self, records: Iterable[JournalRecord]) -> None:
        with self.store.transaction() as db:
            self.write_rows(db, records)

    def prune(self, now_ms: int) -> int:
        with self.store.transaction() as db:
            return db.execute("DELETE FROM invoke_journal WHERE expires_at < ?", (now_ms,)).rowcount


def _session(value: bytes | memoryview | None) -> dict[str, Any] | None:
    """A row's ``session`` column: the map it was written from (None for a
    row without one, or one that is not a map: then the 5002 goes without)."""
    if value is None:
        return None
    decoded = loads(bytes(value), _OWN)
    return decoded if type(decoded) is dict else None
