"""What all of a daemon's connections may hold in memory together.

Each connection bounds itself (``max_send_buffer`` for output, the effective
maximum for one frame of input), but a bound per connection times thousands
of connections is no bound at all. A daemon therefore gives every connection
driver the same two budgets:

* :class:`SendBudget`, bytes queued for peers that have not read them yet. Past
  it, a connection with output unsent stops reading until its peer reads
  (net/transport/stream.py), so peers that never read cannot add up.
* :class:`ReceiveBudget`, bytes of large frames being received. Before reading
  the payload of a frame that declares more than :data:`SMALL_FRAME` bytes, a
  connection reserves the whole declared size; while the reservation does not
  fit, it stops reading. A reservation is only given back when its frame is
  complete or its connection closes, so a connection that was admitted can
  always finish (no two half-received frames wait for each other) and peers
  that trickle large frames slowly hold at most the budget between them; the
  frame timeout (``ConnectionConfig.frame_timeout_ms``) ends the ones that
  never finish. Frames up to :data:`SMALL_FRAME` bytes never wait, so
  ordinary traffic flows while large frames queue.

Both are plain counters kept by the drivers on one trio thread; only waiting
for receive room needs trio.
"""

from __future__ import annotations

import logging

import trio

from ...peer.logthrottle import LogThrottle

__all__ = ["ReceiveBudget", "SendBudget", "SMALL_FRAME"]

log = logging.getLogger("ampcap.daemon")

# A frame whose payload is at most this is read without a reservation: it
# never holds more than about one read (net/stream.RECEIVE_SIZE) besides.
SMALL_FRAME = 16 * 1024


class SendBudget:
    """Bytes queued for peers (not yet taken by the kernel) across every
    driver that shares this budget. ``used`` is kept by the drivers."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a send budget must be positive")
        self.limit = limit
        self.used = 0

    @property
    def exceeded(self) -> bool:
        return self.used > self.limit


class ReceiveBudget:
    """Bytes reserved for large frames being received, across every driver
    that shares this budget."""

    __slots__ = ("limit", "used", "waiting", "_lot", "_lines")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a receive budget must be positive")
        self.limit = limit
        self.used = 0
        self.waiting = 0  # connections waiting for room (for logs and tests)
        self._lot = trio.lowlevel.ParkingLot()
        self._lines = LogThrottle()  # peers decide how often frames wait

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes if they fit. A frame larger than the whole
        budget still gets in when nothing else is reserved, one at a time."""
        if self.used and self.used + size > self.limit:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        """Give back a reservation and wake the connections waiting for room
        (each checks again whether its frame now fits)."""
        if size:
            self.used -= size
            self._lot.unpark_all()

    def note_wait(self, size: int, now_ms: int) -> None:
        """Log that a frame of ``size`` bytes starts waiting (throttled): a
        daemon that stops reading from some peers should say why."""
        self._lines.log(log, "receive budget full", logging.INFO, now_ms,
                        "receive budget full: a %d-byte frame waits, unread, until %d bytes are free "
                        "(%d of %d reserved, %d other frames waiting)", size, self.used + size - self.limit,
                        self.used, self.limit, self.waiting)

    async def wait_for_room(self) -> None:
        """Sleep until some reservation is given back."""
        self.waiting += 1
        try:
            await self._lot.park()
        finally:
            self.waiting -= 1
