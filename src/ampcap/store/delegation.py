"""RFC 005 state in the daemon's database (R19, R20): the credentials it
issued or accepted (DELEG_GRANT) and the revocations it published or
received (DELEG_REVOKE). Implements :class:`ampcap.deleg.service.DelegationState`.

Revocations are kept twice: ``deleg_revocations`` holds the effective one per
(delegator, delegation_id), and ``deleg_revocation_log`` every revocation
event as it came (the append-only auditability of the publisher profile,
§2.2). The effective revocations are also mirrored in memory, since every
delegated invoke asks about each link; they are few and small.
"""

from __future__ import annotations

from ..deleg.credential import Credential, Revocation, parse_credential
from ..errors import AmpError
from .database import StateStore

__all__ = ["DelegationStore", "COMPONENT", "VERSION"]

# Version 2: portable SQL (R25, PostgreSQL): the revocation log's sequence and
# the change probe other processes' revocations are seen by are counter rows
# (they were AUTOINCREMENT and SQLite's PRAGMA data_version).
COMPONENT, VERSION = "delegation", 2

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS deleg_credentials (
        delegator TEXT NOT NULL, delegation_id TEXT NOT NULL, delegate TEXT NOT NULL,
        issued_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, credential BLOB NOT NULL,
        received_at INTEGER NOT NULL, PRIMARY KEY (delegator, delegation_id))""",
    "CREATE INDEX IF NOT EXISTS deleg_credentials_by_id ON deleg_credentials (delegation_id)",
    """CREATE TABLE IF NOT EXISTS deleg_revocations (
        delegator TEXT NOT NULL, delegation_id TEXT NOT NULL, revoked_at INTEGER NOT NULL,
        revocation BLOB NOT NULL, PRIMARY KEY (delegator, delegation_id))""",
    """CREATE TABLE IF NOT EXISTS deleg_revocation_log (
        seq INTEGER PRIMARY KEY, delegator TEXT NOT NULL, delegation_id TEXT NOT NULL,
        revoked_at INTEGER NOT NULL, revocation BLOB NOT NULL, received_at INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS deleg_counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)",
    "INSERT INTO deleg_counters (name, n) VALUES ('revocation_log', 0) ON CONFLICT (name) DO NOTHING",
    "INSERT INTO deleg_counters (name, n) VALUES ('revisions', 0) ON CONFLICT (name) DO NOTHING",
)
_MIGRATIONS = {
    1: ("CREATE TABLE IF NOT EXISTS deleg_counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)",
        "INSERT INTO deleg_counters (name, n) SELECT 'revocation_log', COALESCE(MAX(seq), 0) "
        "FROM deleg_revocation_log"),
}


class DelegationStore:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema(COMPONENT, VERSION, _SCHEMA, _MIGRATIONS)
        self._revoked: dict[tuple[str, str], int] = {}
        self._seen_version = -1
        self._checked_at: int | None = None
        self.refresh()

    POLL_MS = 200
    """How often a verifier looks for revocations another process recorded."""

    def refresh(self, now_ms: int | None = None) -> None:
        """Reread the revocations if another process (``ampcap deleg revoke``
        on this state directory) committed since; asked at most every
        :data:`POLL_MS` (the verifier calls it once per chain)."""
        if now_ms is not None:
            if self._checked_at is not None and 0 <= now_ms - self._checked_at < self.POLL_MS:
                return
            self._checked_at = now_ms
        # The revisions counter moves with every revocation any process
        # commits (the CLI's `ampcap deleg revoke` on this daemon's store,
        # another worker): only then is the mirror read again.
        version = int(self.store.query("SELECT n FROM deleg_counters WHERE name = 'revisions'")[0][0])
        if version != self._seen_version:
            self._seen_version = version
            self._revoked = {(d, i): int(at) for d, i, at in
                             self.store.query("SELECT delegator, delegation_id, revoked_at FROM deleg_revocations")}

    # RevocationStore

    def revoked_at(self, delegator: str, delegation_id: str) -> int | None:
        return self._revoked.get((delegator, delegation_id))

    def record_revocation(self, revocation: Revocation, received_at: int) -> bool:
        key = (revocation.delegator, revocation.delegation_id)
        old = self._revoked.get(key)
        try:
            with self.store.transaction() as db:
                db.execute("UPDATE deleg_counters SET n = n + 1 WHERE name IN ('revocation_log', 'revisions')")
                seq = db.execute("SELECT n FROM deleg_counters WHERE name = 'revocation_log'").fetchone()[0]
                db.execute("INSERT INTO deleg_revocation_log (seq, delegator, delegation_id, revoked_at, "
                           "revocation, received_at) VALUES (?, ?, ?, ?, ?, ?)",
                           (seq, *key, revocation.revoked_at, revocation.raw, received_at))
                # The earliest time wins: a later copy cannot postpone a revocation
                # (decided in the statement too: another process may have written one).
                db.execute("INSERT INTO deleg_revocations (delegator, delegation_id, revoked_at, revocation) "
                           "VALUES (?, ?, ?, ?) ON CONFLICT (delegator, delegation_id) DO UPDATE SET "
                           "revoked_at = excluded.revoked_at, revocation = excluded.revocation "
                           "WHERE excluded.revoked_at < deleg_revocations.revoked_at",
                           (*key, revocation.revoked_at, revocation.raw))
        except self.store.errors as exc:
            raise AmpError(5002, f"state database: {exc}") from None
        if old is None or revocation.revoked_at < old:
            self._revoked[key] = revocation.revoked_at
        return old is None

    # DelegationState

    def record_credential(self, credential: Credential, received_at: int) -> bool:
        try:
            with self.store.transaction() as db:
                cur = db.execute("INSERT INTO deleg_credentials (delegator, delegation_id, delegate, issued_at, "
                                 "expires_at, credential, received_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                                 "ON CONFLICT (delegator, delegation_id) DO NOTHING",
                                 (credential.delegator, credential.delegation_id, credential.delegate,
                                  credential.issued_at, credential.expires_at, credential.raw, received_at))
        except self.store.errors as exc:
            raise AmpError(5002, f"state database: {exc}") from None
        return bool(cur.rowcount == 1)

    def credentials_with_id(self, delegation_id: str, limit: int) -> list[Credential]:
        rows = self.store.query("SELECT credential FROM deleg_credentials WHERE delegation_id = ? "
                                "ORDER BY delegator LIMIT ?", (delegation_id, limit))
        return [parse_credential(bytes(raw)) for (raw,) in rows]

    def credentials(self, limit: int = 1000) -> list[Credential]:
        """Every kept credential (for ``ampcap deleg``'s listing), newest first."""
        rows = self.store.query("SELECT credential FROM deleg_credentials ORDER BY received_at DESC LIMIT ?",
                                (limit,))
        return [parse_credential(bytes(raw)) for (raw,) in rows]
