"""The lines the core asks the daemon to write: its ``Log`` actions and the
executor's RFC 005 §6.4 ``Audit`` actions.

The core builds the text and cuts the peer's values in it; this edge
escapes what is left (:func:`~ampcap.display.printable`), bounds each line,
and throttles every line a peer can cause at will (a ``Log`` with a topic,
a delegation denial) through the daemon's one
:class:`~ampcap.peer.logthrottle.LogThrottle`: at most a few per window.
``Log`` lines go to ``ampcap.daemon``, audit lines to ``ampcap.audit`` (INFO).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...display import MESSAGE_LIMIT, printable
from ...peer.logthrottle import LogThrottle
from ...peer.outbound import Log
from ..transport.clock import Clock

if TYPE_CHECKING:
    from ...peer.executor import Audit

__all__ = ["ActionLog"]

log = logging.getLogger("ampcap.daemon")
audit_log = logging.getLogger("ampcap.audit")  # RFC 005 §6.4 delegation decisions

UNAVAILABLE = 5002
LINE_LIMIT = 2 * MESSAGE_LIMIT  # characters of a line the core asks us to log


class ActionLog:
    """Writes ``Log`` and ``Audit`` actions (see the module docstring)."""

    def __init__(self, clock: Clock, throttle: LogThrottle, on_stale: Callable[[], None] | None = None) -> None:
        """``on_stale``: called when a delegation was refused for a stale
        revocation status (5002), so the publisher gets asked (R20)."""
        self._clock = clock
        self._throttle = throttle
        self._on_stale = on_stale

    def log(self, action: Log) -> None:
        # The core cuts the peer's values in the lines it builds; this bounds
        # any line that quotes one whole all the same.
        if action.topic is None:
            if log.isEnabledFor(action.level):  # not escaped for nothing (a delegated invoke's audit line)
                log.log(action.level, printable(action.message, LINE_LIMIT))
            return
        # A line a peer can cause at will: at most a few per window.
        message = printable(action.message, LINE_LIMIT)
        self._throttle.log(log, action.topic, action.level, self._clock.monotonic_ms(), "%s", message)

    def audit(self, action: Audit) -> None:
        if action.decision.error is not None and action.decision.error.code == UNAVAILABLE \
                and self._on_stale is not None:
            self._on_stale()  # a stale revocation status: ask the publisher
        # RFC 005 §6.4, on the 'ampcap.audit' logger (INFO): a denial is a
        # line a peer can cause at will, so it is throttled like the others.
        if action.decision.allowed:
            if audit_log.isEnabledFor(logging.INFO):
                audit_log.info("%s", printable(action.line, LINE_LIMIT))
        elif audit_log.isEnabledFor(logging.INFO):
            self._throttle.log(audit_log, "delegation denied", logging.INFO, self._clock.monotonic_ms(), "%s",
                               printable(action.line, LINE_LIMIT))
