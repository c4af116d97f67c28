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

Two backends sit behind one surface (:class:`StateStore`): this module's
SQLite file, the embedded default, and PostgreSQL (``store/postgres.py``,
psycopg 3) for several processes or machines of one identity (R25).
:func:`~ampcap.store.opening.open_store` picks one from ``--state-dir``/``--state-url``. Components
write portable SQL (``?`` placeholders, ``TEXT``/``BLOB``/``INTEGER`` columns,
``ON CONFLICT`` upserts, no SQLite-only syntax): docs/scaling.md lists the rules.

Durability modes (what a committed write survives):

- ``Durability.PROCESS`` (``synchronous=NORMAL``): a crash of the daemon
  (``kill -9``, an exception, OOM); WAL appends are handed to the OS before
  commit returns, but not forced to the platter, so a power loss or kernel
  crash may lose the last commits (never corrupt the file).
- ``Durability.POWER`` (``synchronous=FULL``): also a power loss or kernel
  crash; each commit waits for ``fsync``.

On PostgreSQL the server decides what survives a power loss; ``PROCESS``
sets ``synchronous_commit = off`` for the daemon's connection (a server crash
may lose the last commits, as a power loss may here), ``POWER`` keeps it on.
"""

from __future__ import annotations

import enum
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..errors import AmpError

__all__ = ["Durability", "StateStore", "SqliteStore", "Transaction", "Result", "default_state_dir", "parse_state_dir",
           "DATABASE_NAME"]

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


class Result(Protocol):
    """What :meth:`Transaction.execute` returns (a DB-API cursor on both backends)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Transaction(Protocol):
    """What :meth:`StateStore.transaction` yields: statements in portable SQL."""

    def execute(self, sql: str, params: Any = ..., /) -> Result: ...

    def executemany(self, sql: str, rows: Any, /) -> Any: ...


class StateStore:
    """The database one daemon writes (its event loop is the only user of a
    store object; other processes open their own). Backends implement
    :meth:`transaction`, :meth:`query`, :meth:`close` and the owner lock
    (:meth:`take_ownership`, see ``store/owner.py``); schema history is
    shared here.

    ``StateStore.open(None)`` is an in-memory SQLite database with the same
    tables, so the components never branch on whether state is durable."""

    backend = "abstract"
    errors: tuple[type[Exception], ...] = ()
    """The exceptions a failed statement raises on this backend."""
    where = "memory"
    """What to name in messages: a file path, or a URL without its password."""
    keepalive_s: float | None = None
    """How often a daemon touches the store (a trivial read), or None: a backend
    whose connection can break (PostgreSQL restarted) reconnects only when
    used, and takes its owner lock again then (store/owner.py)."""

    def __init__(self, durability: Durability) -> None:
        self.durability = durability
        # Set when this process is one worker of a group sharing the store
        # (R25): its invokes are claimed under this id (net/daemon/claims.py).
        self.worker_id: str | None = None
        self.ownership: Any = None  # the owner lock, held while the process lives (store/owner.py)
        self.path: Path | None = None

    @classmethod
    def open(cls, directory: Path | None, *, durability: Durability = Durability.PROCESS) -> StateStore:
        """The SQLite store under ``directory`` (None: in memory)."""
        return SqliteStore.open_dir(directory, durability=durability)

    @property
    def durable(self) -> bool:
        return True

    def ensure_schema(self, component: str, version: int, statements: Sequence[str],
                      migrations: Mapping[int, Sequence[str]] | None = None) -> int:
        """Create ``component``'s tables (idempotent ``CREATE … IF NOT EXISTS``
        statements, the newest shape) and record ``version``; returns the
        version the store held before (0 for new).

        A store holding an older version is brought up to date first:
        ``migrations[k]`` are the statements that turn version ``k`` into
        ``k + 1`` (``ALTER TABLE … ADD COLUMN`` with a default, typically),
        run in order in the same transaction as the rest, so a crash leaves
        the store either untouched or migrated, never half. One history
        serves both backends: the statements are portable SQL. A store
        written by a newer version is refused: its rows may mean something
        this code would misread."""
        with self.transaction() as db:
            # Under the schema lock: two processes opening one store cannot both migrate it.
            self._lock_schema(db)
            row = db.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
            found = 0 if row is None else int(row[0])
            if found > version:
                raise AmpError(5002, f"state database {self.where}: {component} tables are version {found}, "
                                     f"this ampcap understands up to {version}; use a newer ampcap or another "
                                     f"state store")
            if 0 < found < version:
                for step in range(found, version):
                    if migrations is None or step not in migrations:
                        raise AmpError(5002, f"state database {self.where}: {component} tables are version "
                                             f"{found}, and this ampcap cannot migrate them from version {step}; "
                                             f"use another state store")
                    for statement in migrations[step]:
                        db.execute(statement)
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_versions (component, version) VALUES (?, ?) "
                       "ON CONFLICT (component) DO UPDATE SET version = excluded.version", (component, version))
        return found

    def _lock_schema(self, db: Transaction) -> None:
        """Serialise schema changes between processes (SQLite's BEGIN IMMEDIATE already does)."""

    def transaction(self) -> AbstractContextManager[Transaction]:
        """One atomic batch: everything inside commits together or not at all."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def notify(self, db: Transaction, channel: str, payload: str) -> None:
        """Tell other processes on this store, when ``db`` commits, that
        ``channel`` has news (PostgreSQL NOTIFY). SQLite has no such thing:
        its readers poll, which on one host costs a cheap read."""

    def take_ownership(self, group: str | None) -> Any:
        """The owner lock (``store/owner.py``): held while this process uses
        the store; refused with :class:`~ampcap.store.owner.StoreBusy` when an
        uncoordinated process holds it."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SqliteStore(StateStore):
    """One SQLite file in WAL mode (stdlib ``sqlite3``), or an in-memory database."""

    backend = "sqlite"
    errors = (sqlite3.Error,)

    def __init__(self, connection: sqlite3.Connection, path: Path | None, durability: Durability) -> None:
        super().__init__(durability)
        self._db = connection
        self.path = path
        self.where = str(path) if path is not None else "memory"
        self._owner = threading.get_ident()

    @classmethod
    def open_dir(cls, directory: Path | None, *, durability: Durability = Durability.PROCESS) -> SqliteStore:
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
                # timeout=0: waiting for another process's lock is ours
                # (_busy). SQLite's own handler sleeps 1 ms and more per try,
                # with the worker's whole event loop stopped, while commits
                # take tens of microseconds; and it is not consulted at all
                # when two workers of a new store switch it to WAL at once.
                db = sqlite3.connect(path, isolation_level=None, timeout=0)
                _busy(lambda: db.execute("PRAGMA journal_mode=WAL"))
            except sqlite3.Error as exc:
                raise AmpError(5002, f"state database {path}: {exc}") from None
            store = cls(db, path, durability)
        store._db.execute("PRAGMA synchronous=" + ("FULL" if durability is Durability.POWER else "NORMAL"))
        store._db.execute("PRAGMA foreign_keys=ON")
        # Another worker of the group may hold the write lock right now, and the
        # connection waits for it only through _busy (busy_timeout is 0).
        try:
            _busy(lambda: store._db.execute("CREATE TABLE IF NOT EXISTS schema_versions "
                                            "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"))
        except sqlite3.Error as exc:
            store._db.close()
            raise AmpError(5002, f"state database {store.path}: {exc}") from None
        return store

    @property
    def durable(self) -> bool:
        return self.path is not None

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        _busy(lambda: self._db.execute("BEGIN IMMEDIATE"))
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return _busy(lambda: self._db.execute(sql, params).fetchall())

    def data_version(self) -> int:
        """SQLite's count of commits by *other* connections (a cheap change probe)."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def take_ownership(self, group: str | None) -> Any:
        from .owner import FileOwnership

        return FileOwnership.take(self.path.parent if self.path is not None else None, group)

    def close(self) -> None:
        self._db.close()


BUSY_WAIT_S = 5.0  # how long a statement waits for another process's lock before failing


def _busy(step: Callable[[], Any]) -> Any:
    """``step()``, tried again while another process holds the lock it
    needs (several workers share the file, R25): after 50 µs, doubling up
    to 1 ms, for at most :data:`BUSY_WAIT_S`."""
    try:
        return step()
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
    deadline = time.monotonic() + BUSY_WAIT_S
    pause = 0.00005
    while True:
        time.sleep(pause)
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
        pause = min(pause * 2, 0.001)
