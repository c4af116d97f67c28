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

import sqlite3

from ..deleg.credential import Credential, Revocation, parse_credential
from ..errors import AmpError
from .database import StateStore

__all__ = ["DelegationStore", "COMPONENT", "VERSION"]

COMPONENT, VERSION = "delegation", 1

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
        seq INTEGER PRIMARY KEY AUTOINCREMENT, delegator TEXT NOT NULL, delegation_id TEXT NOT NULL,
        revoked_at INTEGER NOT NULL, revocation BLOB NOT NULL, received_at INTEGER NOT NULL)""",
)


class DelegationStore:
    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.ensure_schema(COMPONENT, VERSION, _SCHEMA)
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
        # PRAGMA data_version changes when *another* connection commits (the
        # CLI's `ampcap deleg revoke` on this daemon's state directory): only
        # then is the mirror read again. Our own writes update it directly.
        version = int(self.store.query("PRAGMA data_version")[0][0])
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
                db.execute("INSERT INTO deleg_revocation_log (delegator, delegation_id, revoked_at, revocation, "
                           "received_at) VALUES (?, ?, ?, ?, ?)",
                           (*key, revocation.revoked_at, revocation.raw, received_at))
                if old is None or revocation.revoked_at < old:
                    # The earliest time wins: a later copy cannot postpone a revocation.
                    db.execute("INSERT OR REPLACE INTO deleg_revocations VALUES (?, ?, ?, ?)",
                               (*key, revocation.revoked_at, revocation.raw))
        except sqlite3.Error as exc:
            raise AmpError(5002, f"state database: {exc}") from None
        if old is None or revocation.revoked_at < old:
            self._revoked[key] = revocation.revoked_at
        return old is None

    # DelegationState

    def record_credential(self, credential: Credential, received_at: int) -> bool:
        try:
            with self.store.transaction() as db:
                cur = db.execute("INSERT OR IGNORE INTO deleg_credentials VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (credential.delegator, credential.delegation_id, credential.delegate,
                                  credential.issued_at, credential.expires_at, credential.raw, received_at))
        except sqlite3.Error as exc:
            raise AmpError(5002, f"state database: {exc}") from None
        return cur.rowcount == 1

    def credentials_with_id(self, delegation_id: str, limit: int) -> list[Credential]:
        rows = self.store.query("SELECT credential FROM deleg_credentials WHERE delegation_id = ? "
                                "ORDER BY delegator LIMIT ?", (delegation_id, limit))
        return [parse_credential(bytes(raw)) for (raw,) in rows]

    def credentials(self, limit: int = 1000) -> list[Credential]:
        """Every kept credential (for ``ampcap deleg``'s listing), newest first."""
        rows = self.store.query("SELECT credential FROM deleg_credentials ORDER BY received_at DESC LIMIT ?",
                                (limit,))
        return [parse_credential(bytes(raw)) for (raw,) in rows]
