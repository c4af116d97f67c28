"""The relay's durable queue over the state store (component ``relay_queue``).

Implements :class:`ampcap.relay.queue.RelayQueue` in the portable SQL of the
store contract (``?`` placeholders, TEXT/BLOB/INTEGER, ``ON CONFLICT``, no
rowid), so it runs unchanged on SQLite and PostgreSQL.

Tables:

* ``relay_record``: one row per accepted message, keyed by ``seq`` (a
  counter row in ``relay_counter``, bumped in the inserting transaction), with
  the exact ingress bytes and ``expires_at = ts + ttl``;
* ``relay_entry``: one row per (record, recipient): the §4 recipient state,
  the delivery claim (``owner``, ``lease_until``: R25) and the federation
  transfer of that recipient (§5.6 handoffs are per recipient);
* ``relay_dedupe``: the dedupe keys ``(msg_id, recipient, from_did)`` until
  the message expires, outliving the record (a resend after commit is still a
  duplicate) and holding the transfer receipt we signed for a handoff;
* ``relay_agent``: DIDs registered with this relay; ``relay_cursor``: each
  poll consumer's pass number.

Polling reads ``relay_entry`` by its ``(recipient, seq)`` index from the
consumer's cursor on, so a page costs the same with a million rows queued
as with a thousand; nothing is loaded at start-up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..relay.model import NewRecord, PushClaim, QueuedCopy, TransferInfo
from ..relay.states import RecipientState, TransferState
from .database import StateStore

__all__ = ["StoreRelayQueue", "VERSION", "Enqueued", "Expired"]

VERSION = 1
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS relay_counter (name TEXT PRIMARY KEY, n INTEGER NOT NULL)",
    "INSERT INTO relay_counter (name, n) VALUES ('seq', 0) ON CONFLICT (name) DO NOTHING",
    """CREATE TABLE IF NOT EXISTS relay_record (
        seq INTEGER PRIMARY KEY,
        msg_id BLOB NOT NULL,
        from_did TEXT NOT NULL,
        raw BLOB NOT NULL,
        accepted_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        relay_path TEXT NOT NULL,
        hop_limit INTEGER NOT NULL,
        upstream TEXT,
        upstream_mode TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS relay_record_expiry ON relay_record (expires_at)",
    """CREATE TABLE IF NOT EXISTS relay_entry (
        seq INTEGER NOT NULL,
        recipient TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL DEFAULT 0,
        last_attempt_at INTEGER,
        last_error INTEGER,
        acked_at INTEGER,
        owner TEXT,
        lease_until INTEGER,
        t_state TEXT NOT NULL DEFAULT 'local_queued',
        t_mode TEXT,
        t_downstream TEXT,
        t_attempts INTEGER NOT NULL DEFAULT 0,
        t_deadline INTEGER NOT NULL DEFAULT 0,
        t_receipt BLOB,
        t_commit_receipt BLOB,
        PRIMARY KEY (seq, recipient)
    )""",
    "CREATE INDEX IF NOT EXISTS relay_entry_recipient ON relay_entry (recipient, seq)",
    "CREATE INDEX IF NOT EXISTS relay_entry_transfer ON relay_entry (t_state, t_deadline)",
    """CREATE TABLE IF NOT EXISTS relay_dedupe (
        msg_id BLOB NOT NULL,
        recipient TEXT NOT NULL,
        from_did TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        receipt BLOB,
        PRIMARY KEY (msg_id, recipient, from_did)
    )""",
    "CREATE INDEX IF NOT EXISTS relay_dedupe_expiry ON relay_dedupe (expires_at)",
    "CREATE TABLE IF NOT EXISTS relay_agent (did TEXT PRIMARY KEY, registered_at INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS relay_cursor (consumer TEXT PRIMARY KEY, pass INTEGER NOT NULL)",
)

_LIVE = "('pending', 'inflight')"
# Deliverable here: not handed to a downstream relay (or handed back).
_LOCAL = "('local_queued', 'commit_reported')"
_ENTRY = ("e.seq, e.recipient, r.msg_id, r.from_did, r.raw, r.expires_at, e.state, e.attempts, e.next_attempt_at, "
          "r.relay_path, r.hop_limit, r.upstream, r.upstream_mode, e.t_state, e.t_mode, e.t_downstream, "
          "e.t_attempts, e.t_deadline, e.t_receipt, e.t_commit_receipt")
_FROM = "FROM relay_entry e JOIN relay_record r ON r.seq = e.seq"


def _blob(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _copy(row: Sequence[Any]) -> QueuedCopy:
    (seq, recipient, msg_id, from_did, raw, expires_at, state, attempts, next_at, path, hop, upstream, up_mode,
     t_state, t_mode, t_down, t_attempts, t_deadline, t_receipt, t_commit) = row
    transfer = None
    if t_mode is not None and t_down is not None:
        transfer = TransferInfo(mode=t_mode, downstream=t_down, state=TransferState(t_state), attempts=t_attempts,
                                deadline=t_deadline, receipt=_blob(t_receipt), commit_receipt=_blob(t_commit))
    return QueuedCopy(seq=seq, recipient=recipient, msg_id=bytes(msg_id), from_did=from_did, raw=bytes(raw),
                      expires_at=expires_at, state=RecipientState(state), attempts=attempts, next_attempt_at=next_at,
                      relay_path=tuple(json.loads(path)), hop_limit=hop, upstream=upstream, upstream_mode=up_mode,
                      transfer=transfer)


@dataclass(frozen=True, slots=True)
class Enqueued:
    seq: int | None
    queued: tuple[str, ...]
    duplicates: tuple[str, ...]
    over_quota: tuple[str, ...]
    claimed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Expired:
    seq: int
    recipient: str
    msg_id: bytes
    from_did: str
    upstream: str | None
    upstream_mode: str | None


class _Nothing(Exception):
    """Leave the transaction without writing (it rolls back), with this result."""

    def __init__(self, result: Enqueued) -> None:
        super().__init__("nothing queued")
        self.result = result


class StoreRelayQueue:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema("relay_queue", VERSION, _SCHEMA)

    # ------------------------------------------------------------ agents

    def register(self, did: str, now: int) -> None:
        with self.store.transaction() as db:
            db.execute("INSERT INTO relay_agent (did, registered_at) VALUES (?, ?) "
                       "ON CONFLICT (did) DO UPDATE SET registered_at = excluded.registered_at", (did, now))

    def is_registered(self, did: str) -> bool:
        return bool(self.store.query("SELECT 1 FROM relay_agent WHERE did = ?", (did,)))

    # ------------------------------------------------------------ ingress

    def enqueue(self, record: NewRecord, *, quota: int, claim: PushClaim | None = None) -> Enqueued:
        try:
            with self.store.transaction() as db:
                return self._enqueue(db, record, quota, claim)
        except _Nothing as nothing:  # rolled back: a refused message leaves nothing behind
            return nothing.result

    def _enqueue(self, db: Any, record: NewRecord, quota: int, claim: PushClaim | None) -> Enqueued:
        fresh: list[str] = []
        duplicates: list[str] = []
        over: list[str] = []
        for recipient in dict.fromkeys(record.recipients):
            row = db.execute("SELECT expires_at FROM relay_dedupe WHERE msg_id = ? AND recipient = ? AND "
                             "from_did = ?", (record.msg_id, recipient, record.from_did)).fetchone()
            if row is not None and row[0] >= record.accepted_at:
                duplicates.append(recipient)
                continue
            # Bounded count: the quota, not the queue's size, bounds its cost.
            live = db.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM relay_entry WHERE recipient = ? AND state "
                              f"IN {_LIVE} LIMIT ?) AS q", (recipient, quota)).fetchone()[0]
            (over if live >= quota else fresh).append(recipient)
        if over:  # all or nothing
            raise _Nothing(Enqueued(None, (), tuple(duplicates), tuple(over)))
        if not fresh:
            return Enqueued(None, (), tuple(duplicates), ())
        db.execute("UPDATE relay_counter SET n = n + 1 WHERE name = 'seq'")
        seq = int(db.execute("SELECT n FROM relay_counter WHERE name = 'seq'").fetchone()[0])
        queued: list[str] = []
        for recipient in fresh:
            # The key is taken atomically: a live key held by another process
            # (which inserted it after our read) updates nothing, rowcount 0.
            taken = db.execute(
                "INSERT INTO relay_dedupe (msg_id, recipient, from_did, expires_at, seq, receipt) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (msg_id, recipient, from_did) DO UPDATE SET "
                "expires_at = excluded.expires_at, seq = excluded.seq, receipt = excluded.receipt "
                "WHERE relay_dedupe.expires_at < ?",
                (record.msg_id, recipient, record.from_did, record.expires_at, seq, record.receipt,
                 record.accepted_at)).rowcount
            (queued if taken == 1 else duplicates).append(recipient)
        if not queued:
            raise _Nothing(Enqueued(None, (), tuple(duplicates), ()))
        claimed = [r for r in queued if claim is not None and r in claim.recipients]
        db.execute("INSERT INTO relay_record (seq, msg_id, from_did, raw, accepted_at, expires_at, status, "
                   "relay_path, hop_limit, upstream, upstream_mode) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (seq, record.msg_id, record.from_did, record.raw, record.accepted_at, record.expires_at,
                    "dispatching" if claimed else "queued", json.dumps(list(record.relay_path)), record.hop_limit,
                    record.upstream, record.transfer_mode))
        pending = [(seq, r) for r in queued if r not in claimed]
        if pending:
            db.executemany("INSERT INTO relay_entry (seq, recipient, state) VALUES (?, ?, 'pending')", pending)
        if claimed:
            assert claim is not None
            db.executemany("INSERT INTO relay_entry (seq, recipient, state, owner, lease_until, attempts, "
                           "last_attempt_at, next_attempt_at) VALUES (?, ?, 'inflight', ?, ?, 1, ?, ?)",
                           [(seq, r, claim.owner, claim.lease_until, record.accepted_at, claim.redeliver_at)
                            for r in claimed])
        return Enqueued(seq, tuple(queued), tuple(duplicates), (), tuple(claimed))

    def prior_receipt(self, from_did: str, msg_id: bytes, recipient: str, now: int) -> bytes | None:
        rows = self.store.query("SELECT receipt FROM relay_dedupe WHERE msg_id = ? AND recipient = ? AND from_did = ? "
                                "AND expires_at >= ?", (msg_id, recipient, from_did, now))
        return _blob(rows[0][0]) if rows else None

    # ------------------------------------------------------------ delivery

    def page(self, recipient: str, after_seq: int, limit: int, now: int) -> list[QueuedCopy]:
        rows = self.store.query(f"SELECT {_ENTRY} {_FROM} WHERE e.recipient = ? AND e.seq > ? AND e.state IN {_LIVE} "
                                f"AND e.t_state IN {_LOCAL} AND r.expires_at >= ? ORDER BY e.seq LIMIT ?",
                                (recipient, after_seq, now, limit))
        return [_copy(row) for row in rows]

    def mark_attempted(self, copies: Sequence[tuple[int, str]], now: int) -> None:
        if not copies:
            return
        with self.store.transaction() as db:
            db.executemany(f"UPDATE relay_entry SET state = 'inflight', attempts = attempts + 1, last_attempt_at = ? "
                           f"WHERE seq = ? AND recipient = ? AND state IN {_LIVE}",
                           [(now, seq, recipient) for seq, recipient in copies])
            db.executemany("UPDATE relay_record SET status = 'dispatching' WHERE seq = ? AND status = 'queued'",
                           [(seq,) for seq, _ in copies])

    def claim(self, seq: int, recipient: str, owner: str, now: int, lease_until: int,
              redeliver_at: int) -> QueuedCopy | None:
        with self.store.transaction() as db:
            claimed = db.execute(
                f"UPDATE relay_entry SET state = 'inflight', owner = ?, lease_until = ?, attempts = attempts + 1, "
                f"last_attempt_at = ?, next_attempt_at = ? WHERE seq = ? AND recipient = ? AND state IN {_LIVE} "
                f"AND t_state IN {_LOCAL} AND next_attempt_at <= ? AND (owner IS NULL OR owner = ? OR lease_until < ?)",
                (owner, lease_until, now, redeliver_at, seq, recipient, now, owner, now)).rowcount
            if claimed != 1:
                return None
            db.execute("UPDATE relay_record SET status = 'dispatching' WHERE seq = ? AND status = 'queued'", (seq,))
            row = db.execute(f"SELECT {_ENTRY} {_FROM} WHERE e.seq = ? AND e.recipient = ?",
                             (seq, recipient)).fetchone()
        return _copy(row)

    def release(self, seq: int, recipient: str, owner: str, next_attempt_at: int, error: int | None) -> bool:
        with self.store.transaction() as db:
            changed = db.execute("UPDATE relay_entry SET state = 'pending', owner = NULL, lease_until = NULL, "
                                 "next_attempt_at = ?, last_error = ? WHERE seq = ? AND recipient = ? AND "
                                 "state = 'inflight' AND owner = ?",
                                 (next_attempt_at, error, seq, recipient, owner)).rowcount
            if changed:
                db.execute("UPDATE relay_record SET status = 'queued' WHERE seq = ? AND status = 'dispatching'", (seq,))
        return changed == 1

    def renew(self, owner: str, lease_until: int) -> int:
        with self.store.transaction() as db:
            return int(db.execute("UPDATE relay_entry SET lease_until = ? WHERE owner = ? AND state = 'inflight'",
                                  (lease_until, owner)).rowcount)

    def due(self, recipient: str, owner: str, now: int, limit: int) -> list[QueuedCopy]:
        rows = self.store.query(f"SELECT {_ENTRY} {_FROM} WHERE e.recipient = ? AND e.state IN {_LIVE} AND "
                                f"e.t_state IN {_LOCAL} AND e.next_attempt_at <= ? AND r.expires_at >= ? AND "
                                f"(e.owner IS NULL OR e.owner = ? OR e.lease_until < ?) ORDER BY e.seq LIMIT ?",
                                (recipient, now, now, owner, now, limit))
        return [_copy(row) for row in rows]

    def next_due(self, recipient: str) -> int | None:
        rows = self.store.query(f"SELECT MIN(next_attempt_at) FROM relay_entry WHERE recipient = ? AND "
                                f"state IN {_LIVE} AND t_state IN {_LOCAL}", (recipient,))
        return rows[0][0] if rows and rows[0][0] is not None else None

    # ------------------------------------------------------------ commit and expiry

    def commit(self, msg_id: bytes, recipient: str, senders: Sequence[str],
               now: int) -> tuple[list[QueuedCopy], list[int]]:
        committed: list[QueuedCopy] = []
        finalized: list[int] = []
        with self.store.transaction() as db:
            for sender in dict.fromkeys(senders):
                row = db.execute("SELECT seq FROM relay_dedupe WHERE msg_id = ? AND recipient = ? AND from_did = ?",
                                 (msg_id, recipient, sender)).fetchone()
                if row is None:
                    continue
                seq = int(row[0])
                entry = db.execute(f"SELECT {_ENTRY} {_FROM} WHERE e.seq = ? AND e.recipient = ? AND "
                                   f"e.state IN {_LIVE}", (seq, recipient)).fetchone()
                if entry is None:
                    continue
                db.execute("UPDATE relay_entry SET state = 'delivered', acked_at = ?, owner = NULL, lease_until = NULL "
                           "WHERE seq = ? AND recipient = ?", (now, seq, recipient))
                committed.append(_copy(entry))
                if self._finalize_if_done(db, seq):
                    finalized.append(seq)
        return committed, finalized

    @staticmethod
    def _finalize_if_done(db: Any, seq: int) -> bool:
        live = db.execute(f"SELECT 1 FROM relay_entry WHERE seq = ? AND state IN {_LIVE} LIMIT 1", (seq,)).fetchone()
        if live is not None:
            return False
        db.execute("DELETE FROM relay_entry WHERE seq = ?", (seq,))
        db.execute("DELETE FROM relay_record WHERE seq = ?", (seq,))
        return True

    def expire(self, now: int, limit: int) -> tuple[list[Expired], list[int]]:
        expired: list[Expired] = []
        finalized: list[int] = []
        with self.store.transaction() as db:
            records = db.execute("SELECT seq, msg_id, from_did, upstream, upstream_mode FROM relay_record "
                                 "WHERE expires_at < ? ORDER BY expires_at LIMIT ?", (now, limit)).fetchall()
            for seq, msg_id, from_did, upstream, up_mode in records:
                for (recipient,) in db.execute(f"SELECT recipient FROM relay_entry WHERE seq = ? AND state IN {_LIVE}",
                                               (seq,)).fetchall():
                    expired.append(Expired(seq, recipient, bytes(msg_id), from_did, upstream, up_mode))
                db.execute("DELETE FROM relay_entry WHERE seq = ?", (seq,))
                db.execute("DELETE FROM relay_record WHERE seq = ?", (seq,))
                finalized.append(seq)
            db.execute("DELETE FROM relay_dedupe WHERE expires_at < ?", (now,))
        return expired, finalized

    def next_expiry(self) -> int | None:
        rows = self.store.query("SELECT MIN(expires_at) FROM relay_record")
        return rows[0][0] if rows and rows[0][0] is not None else None

    # ------------------------------------------------------------ polling cursors

    def cursor_pass(self, consumer: str, *, new: bool) -> int:
        with self.store.transaction() as db:
            db.execute("INSERT INTO relay_cursor (consumer, pass) VALUES (?, 0) ON CONFLICT (consumer) DO NOTHING",
                       (consumer,))
            if new:
                db.execute("UPDATE relay_cursor SET pass = pass + 1 WHERE consumer = ?", (consumer,))
            return int(db.execute("SELECT pass FROM relay_cursor WHERE consumer = ?", (consumer,)).fetchone()[0])

    # ------------------------------------------------------------ federation

    def get(self, seq: int, recipient: str) -> QueuedCopy | None:
        rows = self.store.query(f"SELECT {_ENTRY} {_FROM} WHERE e.seq = ? AND e.recipient = ?", (seq, recipient))
        return _copy(rows[0]) if rows else None

    def set_transfer(self, seq: int, recipient: str, info: TransferInfo) -> None:
        with self.store.transaction() as db:
            db.execute("UPDATE relay_entry SET t_state = ?, t_mode = ?, t_downstream = ?, t_attempts = ?, "
                       "t_deadline = ?, t_receipt = ?, t_commit_receipt = ? WHERE seq = ? AND recipient = ?",
                       (info.state.value, info.mode, info.downstream, info.attempts, info.deadline, info.receipt,
                        info.commit_receipt, seq, recipient))

    def transfers_overdue(self, now: int, limit: int) -> list[QueuedCopy]:
        rows = self.store.query(f"SELECT {_ENTRY} {_FROM} WHERE e.t_state = 'transfer_pending' AND e.t_deadline < ? "
                                f"ORDER BY e.t_deadline LIMIT ?", (now, limit))
        return [_copy(row) for row in rows]

    def handoffs_due(self, now: int, max_attempts: int, limit: int) -> list[QueuedCopy]:
        rows = self.store.query(f"SELECT {_ENTRY} {_FROM} WHERE e.t_state = 'local_queued' AND e.t_mode IS NOT NULL "
                                f"AND e.t_attempts < ? AND e.t_deadline <= ? AND e.state IN {_LIVE} AND "
                                f"r.expires_at >= ? ORDER BY e.t_deadline LIMIT ?", (max_attempts, now, now, limit))
        return [_copy(row) for row in rows]

    def next_transfer_deadline(self, max_attempts: int) -> int | None:
        rows = self.store.query("SELECT MIN(t_deadline) FROM relay_entry WHERE t_state = 'transfer_pending'")
        retry = self.store.query("SELECT MIN(t_deadline) FROM relay_entry WHERE t_state = 'local_queued' AND "
                                 "t_mode IS NOT NULL AND t_attempts < ?", (max_attempts,))
        found = [r[0][0] for r in (rows, retry) if r and r[0][0] is not None]
        return min(found) if found else None

    def find_transfer(self, msg_id: bytes, from_did: str, recipient: str, downstream: str) -> QueuedCopy | None:
        row = self.store.query("SELECT seq FROM relay_dedupe WHERE msg_id = ? AND recipient = ? AND from_did = ?",
                               (msg_id, recipient, from_did))
        if not row:
            return None
        copy = self.get(int(row[0][0]), recipient)
        if copy is None or copy.transfer is None or copy.transfer.downstream != downstream:
            return None
        return copy

    def remove(self, seq: int, recipient: str) -> bool:
        with self.store.transaction() as db:
            db.execute("DELETE FROM relay_entry WHERE seq = ? AND recipient = ?", (seq, recipient))
            return self._finalize_if_done(db, seq)
