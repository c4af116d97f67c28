"""The orders a CAP_QUERY may ask its listing in (the body's ``order``),
spelled once for the body parser, the registry, the Python API and the CLI."""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = ["Order", "ORDERS", "NEWEST_FIRST", "OLDEST_FIRST"]

Order = Literal["newest-first", "oldest-first"]
ORDERS: Final[tuple[Order, ...]] = get_args(Order)
NEWEST_FIRST: Final[Order] = "newest-first"  # the default when a query names none
OLDEST_FIRST: Final[Order] = "oldest-first"
