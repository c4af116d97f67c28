"""RFC 006 session records over the state database (component ``sessions``):
the Session Store Profile. One row per session: its record (§4.3
``session-record`` as CBOR, checkpoint and pins inside it) with the status
and expiry beside it for queries. Rows are written in the daemon's batches,
in the same transaction as the invoke journal, so a terminal reply and the
checkpoint it advances are committed together or not at all; a failed write
is never half applied (the transaction rolls back)."""

from __future__ import annotations

from collections.abc import Iterable

from ..session.record import SessionRecord
from ..wire.cbor import DecodeLimits, dumps, loads
from .database import StateStore, Transaction

__all__ = ["SqliteSessions", "VERSION"]

# Version 2 dropped SQLite's WITHOUT ROWID (the table is rebuilt with the
# same rows): one portable schema history for SQLite and PostgreSQL.
VERSION = 2
_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
        session_id BLOB PRIMARY KEY,
        status TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        record BLOB NOT NULL
    )"""
_SCHEMA = (_TABLE.format(name="sessions"),)
_MIGRATIONS = {
    1: (_TABLE.format(name="sessions_v2"),
        "INSERT INTO sessions_v2 (session_id, status, expires_at, record) "
        "SELECT session_id, status, expires_at, record FROM sessions",
        "DROP TABLE sessions",
        "ALTER TABLE sessions_v2 RENAME TO sessions"),
}
_OWN = DecodeLimits(max_depth=64, max_items=1 << 32, max_bytes=1 << 30)
# Ended sessions are kept this long after they end (an idempotent close, A.12,
# and the audit of §2.2), then dropped.
KEEP_ENDED_MS = 86_400_000


class SqliteSessions:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema("sessions", VERSION, _SCHEMA, _MIGRATIONS)

    def load(self, now_ms: int) -> list[SessionRecord]:
        with self.store.transaction() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ? AND status IN ('closed', 'expired', 'failed')",
                       (now_ms - KEEP_ENDED_MS,))
        return [SessionRecord.from_wire(loads(bytes(row[0]), _OWN))
                for row in self.store.query("SELECT record FROM sessions")]

    def find(self, session_id: bytes) -> SessionRecord | None:
        """One session's record (a worker of a group reads through: another may have changed it)."""
        rows = self.store.query("SELECT record FROM sessions WHERE session_id = ?", (session_id,))
        return SessionRecord.from_wire(loads(bytes(rows[0][0]), _OWN)) if rows else None

    def write_rows(self, db: Transaction, records: Iterable[SessionRecord]) -> None:
        rows = [(r.session_id, r.status.value, r.expires_at, dumps(r.to_wire())) for r in records]
        if rows:
            db.executemany("INSERT INTO sessions (session_id, status, expires_at, record) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT (session_id) DO UPDATE SET status = excluded.status, "
                           "expires_at = excluded.expires_at, record = excluded.record", rows)

    def write(self, records: Iterable[SessionRecord]) -> None:
        with self.store.transaction() as db:
            self.write_rows(db, records)
