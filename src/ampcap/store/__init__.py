"""The daemon's durable state (rulings R19, R25): one store per daemon, or
per group of workers of one identity.

This is the edge, beside :mod:`ampcap.files`: it touches the disk and the
network. The sans-I/O core never sees SQL; each concept that keeps state
(the invoke journal, RFC 006 session records, RFC 005 credentials and
revocations) gets a narrow protocol of its own in its core package and an
implementation here over the one :class:`StateStore`, on either backend:
SQLite (a file, the default) or PostgreSQL (``open_store("postgresql://…")``).
"""

from __future__ import annotations

from .database import Durability, SqliteStore, StateStore, default_state_dir, parse_state_dir
from .opening import is_store_url, open_store

__all__ = ["Durability", "StateStore", "SqliteStore", "open_store", "is_store_url", "default_state_dir",
           "parse_state_dir"]
