"""The executor's invoke journal over the state database (component ``journal``).

Implements :class:`ampcap.peer.journal.InvokeJournal`. One row per accepted
invoke, keyed ``(sender, msg_id)`` (RFC 001's idempotency key): the body
fingerprint a retry must match, the capability (is it idempotent?), the
state, when the row may go, and, once DONE, the terminal message with every
signed field fixed. Re-sealed with the daemon's key it is byte for byte the
message first sent (Ed25519 is deterministic), which is what R8 and R19 ask
of a retry after a restart; keeping the fields rather than the sealed bytes
keeps the seal (and its cost) in one place, the connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from ..peer.dedupe import InvokeKey
from ..peer.journal import JournalRecord, JournalState
from ..peer.outbound import Outbound
from ..wire.cbor import DecodeLimits, dumps, loads
from .database import StateStore

__all__ = ["SqliteJournal", "VERSION"]

VERSION = 1
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS invoke_journal (
        sender TEXT NOT NULL,
        msg_id BLOB NOT NULL,
        fingerprint BLOB NOT NULL,
        capability TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'done')),
        expires_at INTEGER NOT NULL,
        terminal BLOB,
        PRIMARY KEY (sender, msg_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS invoke_journal_expiry ON invoke_journal (expires_at)",
)
_UPSERT = ("INSERT OR REPLACE INTO invoke_journal (sender, msg_id, fingerprint, capability, state, expires_at, "
           "terminal) VALUES (?, ?, ?, ?, ?, ?, ?)")
# Our own bytes, read back: no peer's limits apply.
_OWN = DecodeLimits(max_depth=1024, max_items=1 << 62, max_bytes=1 << 62)


def encode_terminal(out: Outbound) -> bytes:
    """The terminal message's signed fields as one CBOR array (body kept encoded)."""
    to: Any = list(out.to) if isinstance(out.to, tuple) else out.to
    return dumps([out.typ, to, out.reply_to, out.thread_id, out.msg_id, out.ts_ms, out.ttl_ms, out.body_cbor])


def decode_terminal(data: bytes) -> Outbound:
    typ, to, reply, thread, msg_id, ts, ttl, body_cbor = loads(data, _OWN)
    return Outbound(typ=typ, body=loads(body_cbor, _OWN), body_cbor=body_cbor, to=tuple(to) if isinstance(to, list)
                    else to, reply_to=reply, thread_id=thread, msg_id=msg_id, ts_ms=ts, ttl_ms=ttl)


class SqliteJournal:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema("journal", VERSION, _SCHEMA)

    def load(self, now_ms: int) -> list[JournalRecord]:
        self.prune(now_ms)
        records = []
        for sender, msg_id, fingerprint, capability, state, expires_at, terminal in self.store.query(
                "SELECT sender, msg_id, fingerprint, capability, state, expires_at, terminal FROM invoke_journal"):
            records.append(JournalRecord(key=InvokeKey(sender, bytes(msg_id)), fingerprint=bytes(fingerprint),
                                         capability_id=capability, state=JournalState(state),
                                         expires_at=expires_at,
                                         terminal=decode_terminal(terminal) if terminal is not None else None))
        return records

    def write_rows(self, db: sqlite3.Connection, records: Iterable[JournalRecord]) -> None:
        """Within a transaction the caller holds (the daemon's batch)."""
        db.executemany(_UPSERT, [(r.key.sender, r.key.msg_id, r.fingerprint, r.capability_id, r.state.value,
                                  r.expires_at, encode_terminal(r.terminal) if r.terminal is not None else None)
                                 for r in records])

    def write(self, records: Iterable[JournalRecord]) -> None:
        with self.store.transaction() as db:
            self.write_rows(db, records)

    def prune(self, now_ms: int) -> int:
        with self.store.transaction() as db:
            return db.execute("DELETE FROM invoke_journal WHERE expires_at < ?", (now_ms,)).rowcount
