"""Money as RFC 007 §4.2 defines it: integer minor units, a canonical asset
code and a canonical network code. Never a float.

Checks and their codes (§8, §9):

* wrong CBOR type (a float, a string, a bool for ``amount_minor``; a
  missing key): shape, 1001;
* a negative amount or one beyond a CBOR ``uint`` (2^64 - 1): not the
  CDDL's ``uint``, so shape too, 1001;
* an amount above :data:`MAX_AMOUNT` (2^63 - 1): a valid ``uint`` that no
  ledger here can hold (the store's integers are signed 64-bit), refused by
  payee policy, 4104;
* ``asset``/``network`` not in canonical form (A.15: ``"usd"``): 4001.
  Comparison afterwards is byte-exact: nothing is case-folded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import AmpError
from .codes import BAD_REQUEST, MALFORMED, UNSUPPORTED_ASSET

__all__ = ["Money", "MAX_AMOUNT", "MAX_UINT", "parse_money", "check_asset", "check_network"]

MAX_UINT = (1 << 64) - 1
MAX_AMOUNT = (1 << 63) - 1
_ASSET = re.compile(r"[A-Z0-9._-]{1,32}")
_NETWORK = re.compile(r"[a-z0-9._-]{1,64}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_asset(value: Any, path: str = "asset") -> str:
    if not isinstance(value, str):
        raise AmpError(MALFORMED, f"asset must be a text string, found {type(value).__name__}", path=path)
    if not _ASSET.fullmatch(value):
        raise AmpError(BAD_REQUEST, "asset is not canonical (uppercase ASCII [A-Z0-9._-], 1..32)", path=path)
    return value


def check_network(value: Any, path: str = "network") -> str:
    if not isinstance(value, str):
        raise AmpError(MALFORMED, f"network must be a text string, found {type(value).__name__}", path=path)
    if not _NETWORK.fullmatch(value):
        raise AmpError(BAD_REQUEST, "network is not canonical (lowercase ASCII [a-z0-9._-], 1..64)", path=path)
    return value


def check_amount(value: Any, path: str = "amount_minor") -> int:
    # bool is an int subclass; a float (even 1.0) is exactly what §4.2 forbids.
    if isinstance(value, bool) or not isinstance(value, int):
        raise AmpError(MALFORMED, f"amount_minor must be an unsigned integer, found {type(value).__name__}",
                       path=path)
    if value < 0 or value > MAX_UINT:
        raise AmpError(MALFORMED, "amount_minor is not a CBOR uint (0..2^64-1)", path=path)
    if value > MAX_AMOUNT:
        raise AmpError(UNSUPPORTED_ASSET, "amount_minor exceeds what this payee's ledger accounts (2^63-1)",
                       path=path)
    return value


class Money(msgspec.Struct, frozen=True, gc=False):
    """A checked amount: construct it with :func:`parse_money` from the wire,
    or directly from values the program made (checked again here)."""

    amount_minor: int
    asset: str
    network: str

    def __post_init__(self) -> None:
        check_amount(self.amount_minor)
        check_asset(self.asset)
        check_network(self.network)

    def to_wire(self) -> dict[str, Any]:
        return {"amount_minor": self.amount_minor, "asset": self.asset, "network": self.network}

    def same_denomination(self, other: Money) -> bool:
        """Same asset and network, byte for byte (§4.2: no case folding)."""
        return self.asset == other.asset and self.network == other.network

    def with_amount(self, amount_minor: int) -> Money:
        return Money(amount_minor, self.asset, self.network)


def parse_money(value: Any, path: str = "money") -> Money:
    """The ``money`` map of a body, every §4.2 rule applied, in the §8
    precedence: shape (1001) over canonical form (4001) over policy (4104)."""
    if not isinstance(value, Mapping):
        raise AmpError(MALFORMED, f"money must be a map, found {type(value).__name__}", path=path)
    for key in ("amount_minor", "asset", "network"):
        if key not in value:
            raise AmpError(MALFORMED, f"money is missing {key!r}", path=_join(path, key))
    amount = value["amount_minor"]
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0 or amount > MAX_UINT:
        check_amount(amount, _join(path, "amount_minor"))  # raises the shape error
    for key in ("asset", "network"):
        if not isinstance(value[key], str):
            raise AmpError(MALFORMED, f"{key} must be a text string", path=_join(path, key))
    asset = check_asset(value["asset"], _join(path, "asset"))
    network = check_network(value["network"], _join(path, "network"))
    return Money(check_amount(amount, _join(path, "amount_minor")), asset, network)
