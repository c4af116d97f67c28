"""The PostgreSQL backend of :class:`~ampcap.store.database.StateStore` (psycopg 3).

Several processes and machines of one identity share one database (R25);
components run unchanged because they write portable SQL, which this module
adapts as it goes (once per distinct statement, then cached):

* ``?`` placeholders become ``%s`` (components never write ``%``);
* in ``CREATE``/``ALTER TABLE`` statements ``INTEGER`` becomes ``BIGINT``
  (a component's integers are 64-bit on both backends: SQLite's always are)
  and ``BLOB`` becomes ``BYTEA``.

psycopg is imported only when a ``postgresql://`` URL is opened: the SQLite
default never pays for it. The connection runs in autocommit mode, so a
:meth:`PostgresStore.query` outside a transaction sees the latest commits and
holds no snapshot; :meth:`PostgresStore.transaction` is one explicit
transaction (READ COMMITTED: a claim's conditional ``UPDATE`` re-reads the
row it waits for, which is what makes it a claim).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import AmpError
from .database import Durability, StateStore

__all__ = ["PostgresStore", "translate"]

_DDL = re.compile(r"^\s*(CREATE\s+TABLE|ALTER\s+TABLE)", re.IGNORECASE)
_INTEGER = re.compile(r"\bINTEGER\b", re.IGNORECASE)
_BLOB = re.compile(r"\bBLOB\b", re.IGNORECASE)
_SCHEMA_LOCK = 0x616D70636170_01  # "ampcap" + 1: the schema migration lock's advisory key


def translate(sql: str) -> str:
    """Portable SQL (the store contract) as PostgreSQL reads it."""
    if "%" in sql:
        raise ValueError("portable SQL has no '%' (the PostgreSQL backend uses it for placeholders)")
    if _DDL.match(sql):
        sql = _BLOB.sub("BYTEA", _INTEGER.sub("BIGINT", sql))
    return sql.replace("?", "%s")


def _shown_url(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=netloc[0].split(":", 1)[0] + ":***@" + netloc[1]))


class _Tx:
    """A transaction's statements, translated (see :func:`translate`)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._conn = store._conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(self._store._sql(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        rows = list(rows)
        cursor = self._conn.cursor()
        if rows:
            cursor.executemany(self._store._sql(sql), rows)
        return cursor


class PostgresStore(StateStore):
    backend = "postgresql"
    keepalive_s = 1.0
    RETRY_S = 1.0
    SLOW_CONNECT_S = 0.05
    """After a connect that failed slowly (a host that does not answer: up to
    ``connect_timeout``, with the event loop stopped), store calls fail at
    once (5002) for ``RETRY_S`` instead of trying again: one such wait per
    interval, not one per statement. A quick refusal (the server is down,
    its host up) is tried again at the next call."""

    def __init__(self, url: str, durability: Durability) -> None:
        super().__init__(durability)
        import psycopg

        self.errors = (psycopg.Error,)
        self.url = url
        self.where = _shown_url(url)
        self._psycopg = psycopg
        self._statements: dict[str, str] = {}
        self._conn: Any = None
        self._failed: tuple[float, int, str] | None = None  # a slow failed connect: when, its error's code and message
        self._relocking = False
        self.reconnected: Callable[[], None] | None = None
        """Run on each new connection after the first, before it is used
        (the owner lock: a session advisory lock dies with its connection).
        What it raises fails the connect."""
        self._connect()

    @classmethod
    def connect(cls, url: str, *, durability: Durability = Durability.PROCESS) -> PostgresStore:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise AmpError(5002, "a postgresql:// state store needs psycopg 3: pip install 'ampcap[postgres]'") \
                from None
        return cls(url, durability)

    def _connect(self) -> None:
        psycopg = self._psycopg
        failed = self._failed
        if failed is not None and 0 <= time.monotonic() - failed[0] < self.RETRY_S:
            raise AmpError(failed[1], failed[2])
        conn = None
        started = time.monotonic()
        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            if self.durability is Durability.PROCESS:
                conn.execute("SET synchronous_commit = off")
            with conn.transaction():  # workers starting together: IF NOT EXISTS alone races on PostgreSQL
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, "
                             "version BIGINT NOT NULL)")
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            error = AmpError(5002, f"state database {self.where}: {str(exc).strip() or type(exc).__name__}")
            if time.monotonic() - started > self.SLOW_CONNECT_S:
                self._failed = (time.monotonic(), error.code, error.message)
            raise error from None
        self._conn = conn
        self._failed = None
        if self.reconnected is not None and not self._relocking:
            self._relocking = True
            try:
                self.reconnected()
            except Exception as exc:  # the lock is not ours: this connection must not be used
                conn.close()
                self._conn = None
                error = exc if isinstance(exc, AmpError) else \
                    AmpError(5002, f"state database {self.where}: {str(exc).strip() or type(exc).__name__}")
                self._failed = (time.monotonic(), error.code, error.message)
                raise error from None
            finally:
                self._relocking = False

    def _sql(self, sql: str) -> str:
        done = self._statements.get(sql)
        if done is None:
            done = self._statements[sql] = translate(sql)
        return done

    def _live(self) -> Any:
        """The connection, opened again if the server dropped it (a restart of
        PostgreSQL: the statement that met the break failed, the next one
        reconnects)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._connect()
        return self._conn

    def _lock_schema(self, db: Any) -> None:
        db.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def _reopened(self) -> Any:
        """After a statement found the connection broken (the server
        restarted since the last one): a new one, at once."""
        try:
            self._conn.close()
        except Exception:
            pass
        self._conn = None
        return self._live()

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        conn = self._live()
        block = conn.transaction()
        try:
            block.__enter__()  # BEGIN: the first contact with the server since the last statement
        except self._psycopg.OperationalError:
            # The server restarted since: nothing of this transaction was
            # sent, so it may start again on a new connection.
            conn = self._reopened()
            block = conn.transaction()
            block.__enter__()
        try:
            yield _Tx(self)
        except BaseException as exc:
            if not block.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            block.__exit__(None, None, None)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            cursor = self._live().execute(self._sql(sql), params)
        except self._psycopg.OperationalError:
            if self._conn is not None and not self._conn.broken:
                raise
            cursor = self._reopened().execute(self._sql(sql), params)  # a read: safe to send again
        rows: list[tuple[Any, ...]] = cursor.fetchall() if cursor.description is not None else []
        return rows

    def notify(self, db: Any, channel: str, payload: str) -> None:
        db.execute("SELECT pg_notify(?, ?)", (channel, payload))

    def take_ownership(self, group: str | None) -> Any:
        from .owner import AdvisoryOwnership

        return AdvisoryOwnership.take(self, group)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
