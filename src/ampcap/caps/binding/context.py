"""The context API: what a capability callable is handed besides its params.

The executor passes an object satisfying :class:`InvocationContext` as the
second positional argument to a callable that takes one (and the runners
of the bindings to other protocols receive it too). It is how a capability
reports progress, asks for input, sleeps and reads the time without
importing an event loop or a clock, which keeps capability code sans-I/O
and testable.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["InvocationContext"]


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
