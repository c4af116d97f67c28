"""The context API: what a capability callable is handed besides its params.

The executor passes an object satisfying :class:`InvocationContext` as the
second positional argument to a callable that takes one (and the runners
of the bindings to other protocols receive it too). It is how a capability
reports progress, asks for input, sleeps and reads the time without
importing an event loop or a clock, which keeps capability code sans-I/O
and testable. ``remaining_ms()`` is what is left of the invoke's budget:
calls made while serving it get that less a margin (:func:`budget_ms`,
:data:`SERVING_DEADLINE`; docs/steering.md).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from ...errors import AmpError

__all__ = ["InvocationContext", "SERVING_DEADLINE", "MARGIN_MS", "budget_ms", "binding_timeout_ms"]

TIMEOUT = 5003

# Deadlines that travel (ampcap's R23): the deadline (Unix ms) of the invoke
# the current task is serving, set by the daemon around a capability's run;
# a call made from there (a nested invoke, a binding) gets what is left of
# it, less MARGIN_MS for the answer to travel back and be sent on.
SERVING_DEADLINE: ContextVar[int | None] = ContextVar("ampcap_serving_deadline", default=None)
MARGIN_MS = 50


def budget_ms(deadline_ms: int | None, now_ms: int, wanted_ms: int | None) -> int | None:
    """The timeout a call made now gets: ``wanted_ms`` (None: no preference),
    at most what is left of ``deadline_ms`` less the margin. AmpError 5003
    when nothing is left: the call fails before anything is sent."""
    if deadline_ms is None:
        return wanted_ms
    left = deadline_ms - now_ms - MARGIN_MS
    if left <= 0:
        raise AmpError(TIMEOUT, "no time left of the invocation's budget (timeout_ms)", details={"budget_ms": 0})
    return left if wanted_ms is None else min(wanted_ms, left)


@runtime_checkable
class InvocationContext(Protocol):
    """Handed to a capability callable by the executor (the edge implements it).

    ``progress`` becomes an RFC 006 PROGRESS message correlated to the
    invoke; it is async because sending may wait for the connection.
    """

    @property
    def capability_id(self) -> str: ...

    @property
    def version(self) -> str: ...

    def now_ms(self) -> int:
        """Wall-clock Unix milliseconds (injected, so tests can fix it)."""
        ...

    def remaining_ms(self) -> int | None:
        """What is left of the invoke's budget (its ``timeout_ms``), in
        milliseconds, never below 0; None when it has no deadline. Calls
        made while serving it get this less a small margin by default."""
        ...

    async def sleep(self, ms: int) -> None:
        """Suspend for ``ms`` milliseconds; cancellable by the executor."""
        ...

    async def progress(self, percent: float | None, message: str | None = None) -> None:
        """Report progress (0–100, or None when unknown) to the invoker."""
        ...

    async def ask(self, prompt: str, *, options: list[str] | None = None, timeout_ms: int | None = None) -> str:
        """Ask the invoker for input mid-call (RFC 006 INPUT_REQUIRED) and
        return its answer; AmpError 4001 when it declines, 5003 when no
        answer comes within ``timeout_ms``."""
        ...


def binding_timeout_ms(own_ms: int | None, context: InvocationContext) -> int | None:
    """A binding's timeout (the MCP request's, the HTTP request's, the gRPC
    deadline): its own ``timeout_ms``, at most what is left of the invoke's
    budget less the margin (R23); AmpError 5003 when nothing is left, before
    the implementation is called."""
    remaining = getattr(context, "remaining_ms", None)  # a context of another making may lack it
    left = remaining() if remaining is not None else None
    if left is None:
        return own_ms
    return budget_ms(left, 0, own_ms)  # a deadline ``left`` ms after a "now" of 0
