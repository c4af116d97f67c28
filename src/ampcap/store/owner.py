"""Who may use a state store: one process, or one coordinating group (R25).

Several daemons of one identity may share a store only when they coordinate
(``serve --workers``: they claim each invoke before running it). Two that
would share one without knowing of each other (today: every daemon started
with the default identity and no ``--state-dir`` opens the same file) must
not both run: each would take the other's RUNNING journal rows for invokes a
restart interrupted. So a process takes the store's owner lock at start:

* a *group* is named by a token its workers share (``serve --workers`` makes
  one up and hands it to its children; machines of one fleet are configured
  with the same one); a process on its own is a group of one, with a fresh
  random token;
* the store records the group that holds it (a hash of the token, never the
  token), and every live member holds a *shared* lock named after that hash;
* a process of another group may take the store only when no member of the
  recorded group is alive, which it tests by trying that group's lock
  *exclusively*: it succeeds only when no member holds it.

The locks are the operating system's or the database server's, so they die
with their holder: a worker killed with SIGKILL leaves nothing behind to
clean up. SQLite: ``flock`` on files beside the database. PostgreSQL:
session advisory locks on the store's connection (one database, one owner).
The record and the test are done under a short exclusive gate lock, so two
starting processes cannot both find the store free.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any

from ..errors import AmpError

__all__ = ["StoreBusy", "FileOwnership", "AdvisoryOwnership", "group_hash", "new_group_token"]


def advisory_key(name: str) -> int:
    """A PostgreSQL advisory lock key (signed 64-bit) for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big", signed=True)


class StoreBusy(AmpError):
    """Another process, not of this group, uses the store."""

    def __init__(self, where: str) -> None:
        super().__init__(5002, f"state store {where} is in use by another ampcap process that does not coordinate "
                               f"with this one")
        self.where = where


def new_group_token() -> str:
    return secrets.token_hex(16)


def group_hash(token: str) -> str:
    return hashlib.sha256(b"ampcap store group\0" + token.encode("utf-8")).hexdigest()[:32]


class FileOwnership:
    """The owner lock of a SQLite state directory (``flock``)."""

    def __init__(self, directory: Path | None, group: str, fd: int | None) -> None:
        self.directory = directory
        self.group = group  # the group's hash
        self._fd = fd

    @classmethod
    def take(cls, directory: Path | None, token: str | None) -> FileOwnership:
        mine = group_hash(token if token is not None else new_group_token())
        if directory is None:  # in memory: nobody else can see it
            return cls(None, mine, None)
        gate = os.open(directory / "owner.gate", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)  # held for a few syscalls by whoever starts
            record = directory / "owner.group"
            try:
                holder = record.read_text().strip()
            except FileNotFoundError:
                holder = ""
            if holder and holder != mine and cls._alive(directory, holder):
                raise StoreBusy(str(directory))
            fd = os.open(directory / f"group-{mine}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)
            if holder != mine:
                for stale in directory.glob("group-*.lock"):
                    if stale.name != f"group-{mine}.lock":
                        stale.unlink(missing_ok=True)
                tmp = directory / "owner.group.tmp"
                tmp.write_text(mine + "\n")
                tmp.replace(record)
            return cls(directory, mine, fd)
        finally:
            os.close(gate)

    @staticmethod
    def _alive(directory: Path, holder: str) -> bool:
        try:
            fd = os.open(directory / f"group-{holder}.lock", os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing releases the probe's lock
        return False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class AdvisoryOwnership:
    """The owner lock of a PostgreSQL state store (session advisory locks).

    The record is the ``store_owner`` row; the group lock is an advisory lock
    keyed by the group's hash, held shared by every member's connection. A
    member whose connection breaks (the server restarted) loses it, so the
    store takes it again on each new connection before using it
    (``PostgresStore.reconnected``): the same test as at start. Should
    another group have taken the store meanwhile (every member was cut off,
    and an uncoordinated daemon started), the new connection is refused
    (StoreBusy, 5002): this process's statements fail rather than share the
    store uncoordinated."""

    GATE = "ampcap store owner gate"

    def __init__(self, store: Any, group: str) -> None:
        self._store = store
        self.group = group

    @classmethod
    def take(cls, store: Any, token: str | None) -> AdvisoryOwnership:
        mine = group_hash(token if token is not None else new_group_token())
        store.ensure_schema("owner", 1, ("CREATE TABLE IF NOT EXISTS store_owner (id INTEGER PRIMARY KEY, "
                                         "group_hash TEXT NOT NULL)",))
        owner = cls(store, mine)
        owner._lock()
        store.reconnected = owner._lock
        return owner

    def _lock(self) -> None:
        """Take the group's lock on the store's current connection (or raise StoreBusy)."""
        store, mine = self._store, self.group
        with store.transaction() as db:
            db.execute("SELECT pg_advisory_xact_lock(?)", (advisory_key(self.GATE),))
            row = db.execute("SELECT group_hash FROM store_owner WHERE id = 1").fetchone()
            holder = row[0] if row is not None else ""
            if holder and holder != mine:
                probe = advisory_key("ampcap group " + holder)
                if db.execute("SELECT pg_try_advisory_lock(?)", (probe,)).fetchone()[0]:
                    db.execute("SELECT pg_advisory_unlock(?)", (probe,))
                else:
                    raise StoreBusy(store.where)
            db.execute("SELECT pg_advisory_lock_shared(?)", (advisory_key("ampcap group " + mine),))
            db.execute("INSERT INTO store_owner (id, group_hash) VALUES (1, ?) "
                       "ON CONFLICT (id) DO UPDATE SET group_hash = excluded.group_hash", (mine,))

    def release(self) -> None:
        if self._store is not None:
            self._store.reconnected = None
            try:
                self._store.query("SELECT pg_advisory_unlock_shared(?)", (advisory_key("ampcap group " + self.group),))
            except self._store.errors:
                pass  # the connection is gone, and its locks with it
            except AmpError:
                pass  # it could not be opened again: nothing is held
            self._store = None
