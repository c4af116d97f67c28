"""The bounds on a binding's ``timeout_ms``, shared by the local kinds
(:mod:`.local`) and the bindings to other protocols (:mod:`.other_protocols`),
which otherwise do not depend on each other."""

from __future__ import annotations

__all__ = ["DEFAULT_COMMAND_TIMEOUT_MS", "DEFAULT_REMOTE_TIMEOUT_MS", "MAX_TIMEOUT_MS"]

DEFAULT_COMMAND_TIMEOUT_MS = 30_000
# A binding to another protocol waits as long as a command by default.
DEFAULT_REMOTE_TIMEOUT_MS = DEFAULT_COMMAND_TIMEOUT_MS
MAX_TIMEOUT_MS = 24 * 3600 * 1000
