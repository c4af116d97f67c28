"""How many lines a peer can make us log.

Some warnings are triggered by whatever a peer chooses to send: a reply that
matches no call, a message id reused for a different invoke. A peer that
sends ten thousand of those a second must not turn into ten thousand log
lines a second, so such :class:`~ampcap.peer.outbound.Log` actions name a
``topic`` and pass through a :class:`LogThrottle`: each topic logs at its
own level up to ``burst`` times per window, then at DEBUG until the window
ends, with one line saying so. Plain code with the time passed in, like the
rest of ``ampcap.peer``.
"""

from __future__ import annotations

import logging

import msgspec

__all__ = ["LogThrottle"]


class _Window(msgspec.Struct):
    start_ms: int
    count: int = 0


class LogThrottle:
    """Per topic: ``burst`` lines per ``window_ms`` at their own level, the
    rest at DEBUG. Topics are fixed strings in our code, so the table is
    small."""

    def __init__(self, *, burst: int = 10, window_ms: int = 10_000) -> None:
        self.burst = burst
        self.window_ms = window_ms
        self._windows: dict[str, _Window] = {}

    def level(self, topic: str, level: int, now_ms: int) -> tuple[int, str | None]:
        """The level to log this line at, and a notice to log first (at the
        line's own level, once per window, when the topic starts being
        demoted)."""
        window = self._windows.get(topic)
        if window is None or now_ms - window.start_ms >= self.window_ms or now_ms < window.start_ms:
            window = self._windows[topic] = _Window(now_ms)
        window.count += 1
        if window.count <= self.burst:
            return level, None
        if window.count == self.burst + 1:
            seconds = max(0.0, (window.start_ms + self.window_ms - now_ms) / 1000)
            return logging.DEBUG, (f"more than {self.burst} '{topic}' lines in {self.window_ms / 1000:g}s; "
                                   f"further ones are logged at DEBUG for the next {seconds:.1f}s")
        return logging.DEBUG, None

    def log(self, logger: logging.Logger, topic: str, level: int, now_ms: int, message: str, *args: object) -> None:
        """Log ``message % args`` on ``logger`` through the throttle (the
        notice, when one is due, first and at ``level``)."""
        at, notice = self.level(topic, level, now_ms)
        if notice is not None:
            logger.log(level, "%s", notice)
        logger.log(at, message, *args)
