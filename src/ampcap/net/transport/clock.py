"""The two clocks the daemon needs, injected so tests can replace them.

* **Wall time** (Unix ms) stamps envelopes (``ts``) and checks expiry; the
  sans-I/O core receives it as ``now_ms``. It can jump (NTP), so it is
  never used to *measure* anything.
* **Monotonic time** (ms, arbitrary origin) measures latencies for the logs.

Deadlines handed out by the core (``get_timer()``) are wall-clock values;
the edge turns "deadline − wall now" into a trio deadline, so trio's own
clock (``MockClock`` in tests) decides when they fire.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
import trio

__all__ = ["Clock", "SYSTEM_CLOCK", "wall_clock_ms", "trio_clock", "to_trio_deadline"]


def wall_clock_ms() -> int:
    """Unix time in milliseconds (what envelopes carry)."""
    return time.time_ns() // 1_000_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Clock(msgspec.Struct, frozen=True):
    """``wall_ms()``: Unix milliseconds; ``monotonic_ms()``: for durations."""

    wall_ms: Callable[[], int] = wall_clock_ms
    monotonic_ms: Callable[[], int] = _monotonic_ms


SYSTEM_CLOCK = Clock()


def trio_clock(origin_ms: int = 1_763_800_000_000) -> Clock:
    """A clock that follows ``trio.current_time()`` (so a ``MockClock`` with
    autojump drives envelope time and timers alike). Must be called inside
    ``trio.run``; ``origin_ms`` is the Unix time at trio time 0."""

    def wall() -> int:
        return origin_ms + int(trio.current_time() * 1000)

    def mono() -> int:
        return int(trio.current_time() * 1000)

    return Clock(wall_ms=wall, monotonic_ms=mono)


def to_trio_deadline(deadline_ms: int | None, wall_ms: Callable[[], int]) -> float:
    """A core deadline (wall ms, as read from ``wall_ms``) as an absolute trio
    deadline (``inf`` for none)."""
    if deadline_ms is None:
        return float("inf")
    return trio.current_time() + max(0, deadline_ms - wall_ms()) / 1000
