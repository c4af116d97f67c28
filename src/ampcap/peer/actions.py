"""What the provider side asks of the daemon: the actions the executor
(:mod:`.executor`, CAP_INVOKE) and the CAP_QUERY answers (:mod:`.query_answers`)
return, besides :class:`~.outbound.Send` and :class:`~.outbound.Log`.

* :class:`Execute` a validated :class:`Job` (the daemon runs the binding and
  later calls :meth:`Executor.complete <ampcap.peer.executor.Executor.complete>`);
* :class:`Cancel` a running job (its terminal message is already sent);
* :class:`~.delegated.Audit` a delegated invoke's decision, and
  :class:`~.journal.Persist` what the journal keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import msgspec

from .dedupe import InvokeKey
from .delegated import Audit
from .journal import Persist
from .outbound import Log, Send
from .status_wait import FetchStatus

__all__ = ["Job", "Execute", "Cancel", "Action"]


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """An accepted invocation, ready to run."""

    key: InvokeKey  # (sender DID, invoke message id)
    conn: Hashable  # where the invoke first arrived
    capability_id: str  # the resolved, concrete ``name:version``
    descriptor: Any
    params: Any  # as adapted by step 6
    binding: Any
    deadline_ms: int
    thread_id: bytes | None
    session: Mapping[str, Any] | None
    adapt_result: Callable[[Any], Any] | None = None  # see Resolved
    encrypted: bool = False  # the invoke came authcrypted: so do its replies
    delegator: str | None = None  # a delegated invoke: on whose behalf (RFC 005, the first link's delegator)
    # ... and its chain's (delegator, delegation_id) pairs: a session caches
    # their fingerprint and re-checks them on resume (RFC 006 §7.3).
    delegation_links: tuple[tuple[str, str], ...] = ()


class Execute(msgspec.Struct, frozen=True, kw_only=True):
    job: Job


class Cancel(msgspec.Struct, frozen=True, kw_only=True):
    """Stop the task running ``key``; its terminal CAP_RESULT (``code``) is already sent."""

    key: InvokeKey
    code: int


Action = Send | Execute | Cancel | Log | Audit | Persist | FetchStatus
