"""Which backend a ``--state-dir`` / ``--state-url`` value names, and opening it.

Apart from :mod:`.database` so that the two backends (:mod:`.database`'s
SQLite, :mod:`.postgres`) both sit below the one function that chooses
between them, and neither imports the other's chooser.
"""

from __future__ import annotations

from pathlib import Path

from .database import Durability, SqliteStore, StateStore, parse_state_dir

__all__ = ["is_store_url", "open_store"]


def is_store_url(value: str) -> bool:
    """Is ``value`` a PostgreSQL URL (``--state-url``) rather than a directory?"""
    return value.startswith(("postgresql://", "postgres://"))


def open_store(target: str | Path | None, *, durability: Durability = Durability.PROCESS) -> StateStore:
    """The store for ``target``: a ``postgresql://`` URL (psycopg 3, imported
    only then), a directory (SQLite), or None / ``"none"`` (in memory)."""
    if isinstance(target, str):
        if is_store_url(target):
            from .postgres import PostgresStore

            return PostgresStore.connect(target, durability=durability)
        target = parse_state_dir(target)
    return SqliteStore.open_dir(target, durability=durability)
