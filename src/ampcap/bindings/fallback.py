"""A capability's several bindings, tried in order (R17).

The next binding is tried only when the one before failed *before its
implementation could have run* (:class:`~ampcap.caps.binding.other_protocols.NotRun`: a
server that will not start or connect, a refused connection, a name that
does not resolve). Any other failure (an error reply, a timeout, a
connection dropped mid-call) is the answer: no invoke ever runs twice.
Which binding ran is logged (at DEBUG, -vv: one line per invoke), never sent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..caps.binding.other_protocols import Fallback, NotRun

__all__ = ["run_fallback"]

log = logging.getLogger("ampcap.bindings")


async def run_fallback(fallback: Fallback, run_one: Callable[[Any], Awaitable[Any]], capability_id: str) -> Any:
    last: NotRun | None = None
    for index, binding in enumerate(fallback.bindings):
        try:
            result = await run_one(binding)
        except NotRun as exc:
            last = exc
            following = fallback.bindings[index + 1].kind if index + 1 < len(fallback.bindings) else None
            log.debug("capability %s: %s binding did not run (%s)%s", capability_id, binding.kind, exc.message,
                     f"; trying {following}" if following else "; no binding left")
            continue
        if index:
            log.debug("capability %s ran through its %s binding", capability_id, binding.kind)
        return result
    assert last is not None
    raise last
