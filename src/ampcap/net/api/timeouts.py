"""A Python API call's timeout in seconds as the wire's ``timeout_ms``,
within the budget of the invoke the calling task serves (R23: deadlines
that travel). :class:`~ampcap.net.api.remote.Remote` and
:class:`~ampcap.net.api.sessions.Session` both take it from here."""

from __future__ import annotations

from ...caps.binding.context import SERVING_DEADLINE, budget_ms
from ...wire.cbor import UINT64_MAX  # timeout_ms is a wire uint

__all__ = ["DEFAULT_INVOKE_TIMEOUT_MS", "invoke_timeout_ms", "wire_ms"]

DEFAULT_INVOKE_TIMEOUT_MS = 60_000


def invoke_timeout_ms(timeout: float | None, now_ms: int) -> int:
    """An invoke's ``timeout_ms``: the caller's (60 s by default), within
    the budget left of the invoke this task serves, if any (R23)."""
    wanted = wire_ms(timeout) if timeout is not None else None
    deadline = SERVING_DEADLINE.get()
    if deadline is None:
        return wanted if wanted is not None else DEFAULT_INVOKE_TIMEOUT_MS
    budget = budget_ms(deadline, now_ms, wanted)
    assert budget is not None
    return budget


def wire_ms(seconds: float) -> int:
    """A timeout in seconds as wire milliseconds. ``math.inf`` (or anything
    past what the wire can say) means as long as the provider allows."""
    if not seconds > 0:  # also refuses NaN
        raise ValueError("timeout must be a positive number of seconds")
    if seconds * 1000 >= UINT64_MAX:
        return UINT64_MAX
    return max(1, int(seconds * 1000))
