"""Delivery scheduling (RFC 003 §5.3): which endpoint first, and when to try
again. Randomness (the jitter) comes from an injected source, so tests and
replays are deterministic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

__all__ = ["BINDING_CLASS", "order_endpoints", "backoff_ms", "next_attempt_at", "handoff_retry_at", "Random"]

Random = Callable[[], float]
"""A source of floats in [0, 1) (``random.Random(seed).random`` in tests)."""

# RFC 002 §3.5: amps > wss > https. ampcap's plaintext test schemes rank
# with their TLS counterparts (amp:// with amps://, ws:// with wss://).
BINDING_CLASS = {"amps": 0, "amp": 0, "wss": 1, "ws": 1, "https": 2, "http": 2}


def order_endpoints(urls: Sequence[str]) -> list[str]:
    """The eligible endpoints by binding priority; within one class the DID
    service order (the input order) is kept. Unknown schemes are not eligible."""
    ranked = [(BINDING_CLASS[urlsplit(u).scheme], i, u) for i, u in enumerate(urls)
              if urlsplit(u).scheme in BINDING_CLASS]
    return [u for _, _, u in sorted(ranked)]


def backoff_ms(attempts: int, *, base_ms: int, cap_ms: int, jitter_ms: int, random: Random) -> int:
    """Exponential backoff after ``attempts`` failed attempts (1 -> base),
    capped, plus jitter drawn from ``random`` in ``[0, jitter_ms)``."""
    exponent = max(attempts - 1, 0)
    delay = cap_ms if exponent >= 62 else min(cap_ms, base_ms << exponent)
    return delay + int(random() * jitter_ms)


def next_attempt_at(now: int, attempts: int, expires_at: int, *, base_ms: int, cap_ms: int, jitter_ms: int,
                    random: Random) -> int | None:
    """When to try again, or None when that would be past expiry: retries
    are bounded by the expiry horizon, not by a count (§5.3)."""
    at = now + backoff_ms(attempts, base_ms=base_ms, cap_ms=cap_ms, jitter_ms=jitter_ms, random=random)
    return at if at <= expires_at else None


def handoff_retry_at(now: int, attempts: int, expires_at: int, *, base_ms: int, cap_ms: int,
                     max_attempts: int) -> int | None:
    """§5.6.7: 1000, 2000, 4000, ... ms capped at 30000, at most
    ``max_attempts`` handoffs, never past local expiry. None: stop handing off."""
    if attempts >= max_attempts:
        return None
    at = now + min(cap_ms, base_ms << max(attempts - 1, 0))
    return at if at <= expires_at else None
