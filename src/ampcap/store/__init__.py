"""The daemon's durable state (ruling R19): one SQLite database per daemon.

This is the edge, beside :mod:`ampcap.files`: it touches the disk. The
sans-I/O core never sees SQLite; each concept that keeps state (the invoke
journal, RFC 006 session records, RFC 005 credentials and revocations) gets a
narrow protocol of its own in its core package and an implementation here
over the one :class:`StateStore`.
"""

from __future__ import annotations

from .database import Durability, StateStore, default_state_dir, parse_state_dir

__all__ = ["Durability", "StateStore", "default_state_dir", "parse_state_dir"]
