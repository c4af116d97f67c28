"""RFC 003 Appendix A vectors driven against a relay (``--relay URL``)."""

from __future__ import annotations

from .vectors import Vector

__all__ = ["RELAY_VECTORS"]

RELAY_VECTORS: tuple[Vector, ...] = ()
