"""One SQLite database (stdlib ``sqlite3``, WAL mode) under ``serve --state-dir``.

Why one database and not a file per concept: an invoke's terminal reply, the
session checkpoint it advances and a revocation it depends on are committed
together or not at all, and a shared backend (PostgreSQL, R19) later replaces
one thing, not several.

Each component (``journal``, ``sessions``, ``delegation``) owns its tables and
declares them with :meth:`StateStore.ensure_schema`; the ``schema_versions``
table remembers which version of them the file holds, so a newer ampcap
migrates it (the component's ``migrations``, in the same transaction) and an
older one refuses a file it does not understand instead of misreading it.

Durability modes (what a committed write survives):

- ``Durability.PROCESS`` (``synchronous=NORMAL``): a crash of the daemon
  (``kill -9``, an exception, OOM); WAL appends are handed to the OS before
  commit returns, but not forced to the platter, so a power loss or kernel
  crash may lose the last commits (never corrupt the file).
- ``Durability.POWER`` (``synchronous=FULL``): also a power loss or kernel
  crash; each commit waits for ``fsync``.
"""

from __future__ import annotations

import enum
import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import AmpError

__all__ = ["Durability", "StateStore", "default_state_dir", "parse_state_dir", "DATABASE_NAME"]

DATABASE_NAME = "state.sqlite3"


class Durability(enum.Enum):
    PROCESS = "process"
    POWER = "power"


def default_state_dir(did: str, env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/ampcap/<fingerprint>/``, else ``~/.local/state/ampcap/<fingerprint>/``.

    The fingerprint is the first 16 hex digits of SHA-256 over the DID: two
    identities on one machine never share a journal (an invoke id is unique
    per sender and receiver, not per machine), and the directory name stays
    short and free of ``:`` whatever the DID method."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_STATE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path(environ.get("HOME") or Path.home()) / ".local" / "state"
    return root / "ampcap" / hashlib.sha256(did.encode("utf-8")).hexdigest()[:16]


def parse_state_dir(value: str) -> Path | None:
    """The ``--state-dir`` value: ``none`` keeps everything in memory (``None``)."""
    if value.strip() == "":
        raise ValueError("--state-dir needs a directory, or 'none' to keep state in memory")
    return None if value == "none" else Path(value)


class StateStore:
    """The database one daemon writes. Not shared between threads: the
    daemon's event loop is its only writer (``check_same_thread`` guards it).

    ``StateStore.open(None)`` is an in-memory database with the same tables,
    so the components never branch on whether state is durable."""

    def __init__(self, connection: sqlite3.Connection, path: Path | None, durability: Durability) -> None:
        self._db = connection
        self.path = path
        self.durability = durability
        self._owner = threading.get_ident()

    @classmethod
    def open(cls, directory: Path | None, *, durability: Durability = Durability.PROCESS) -> StateStore:
        if directory is None:
            db = sqlite3.connect(":memory:", isolation_level=None)
            store = cls(db, None, durability)
        else:
            try:
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise AmpError(5002, f"state directory {directory}: {exc.strerror or exc}") from None
            if not directory.is_dir():
                raise AmpError(5002, f"state directory {directory}: not a directory")
            path = directory / DATABASE_NAME
            try:
                # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a batch
                # is exactly one transaction and nothing is committed behind our back.
                db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
                db.execute("PRAGMA journal_mode=WAL")
            except sqlite3.Error as exc:
                raise AmpError(5002, f"state database {path}: {exc}") from None
            store = cls(db, path, durability)
        store._db.execute("PRAGMA synchronous=" + ("FULL" if durability is Durability.POWER else "NORMAL"))
        store._db.execute("PRAGMA foreign_keys=ON")
        store._db.execute("CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        return store

    @property
    def durable(self) -> bool:
        return self.path is not None

    def ensure_schema(self, component: str, version: int, statements: Sequence[str],
                      migrations: Mapping[int, Sequence[str]] | None = None) -> int:
        """Create ``component``'s tables (idempotent ``CREATE … IF NOT EXISTS``
        statements, the newest shape) and record ``version``; returns the
        version the file held before (0 for new).

        A file holding an older version is brought up to date first:
        ``migrations[k]`` are the statements that turn version ``k`` into
        ``k + 1`` (``ALTER TABLE … ADD COLUMN`` with a default, typically),
        run in order in the same transaction as the rest, so a crash leaves
        the file either untouched or migrated, never half. A file written by
        a newer version is refused: its rows may mean something this code
        would misread."""
        with self.transaction():
            # Read under the write lock: two daemons opening one file cannot both migrate it.
            row = self._db.execute("SELECT version FROM schema_versions WHERE component = ?",
                                   (component,)).fetchone()
            found = 0 if row is None else int(row[0])
            if found > version:
                raise AmpError(5002, f"state database {self.path}: {component} tables are version {found}, "
                                     f"this ampcap understands up to {version}; use a newer ampcap or another "
                                     f"--state-dir")
            if 0 < found < version:
                for step in range(found, version):
                    if migrations is None or step not in migrations:
                        raise AmpError(5002, f"state database {self.path}: {component} tables are version "
                                             f"{found}, and this ampcap cannot migrate them from version {step}; "
                                             f"use another --state-dir")
                    for statement in migrations[step]:
                        self._db.execute(statement)
            for statement in statements:
                self._db.execute(statement)
            self._db.execute("INSERT OR REPLACE INTO schema_versions (component, version) VALUES (?, ?)",
                             (component, version))
        return found

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic batch: everything inside commits together or not at all."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, params).fetchall()

    def close(self) -> None:
        self._db.close()
