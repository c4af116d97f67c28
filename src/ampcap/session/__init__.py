"""RFC 006 sessions, sans-I/O: records (§4.2), context carriage (§4.4),
control operations (§5), the §8 state tables, the provider and client roles.

Nothing here does I/O: time comes in as ``now_ms``, randomness as an
injected ``entropy`` callable, and what must be kept durably leaves as
:class:`~.provider.SaveSession` actions that ``ampcap.store.sessions``
commits at the edge.
"""

from __future__ import annotations

from .record import SESS_V, Checkpoint, SessionRecord, ThreadMode
from .state import SessionInput, SessionState

__all__ = ["SESS_V", "Checkpoint", "SessionRecord", "ThreadMode", "SessionInput", "SessionState"]
