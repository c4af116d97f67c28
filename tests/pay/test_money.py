"""§4.2 money: integers only, canonical codes, bounded amounts."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.pay.money import MAX_AMOUNT, MAX_UINT, Money, parse_money


def _code(value: object) -> int:
    with pytest.raises(AmpError) as err:
        parse_money(value)
    return err.value.code


def test_a_canonical_money_map_is_read_exactly() -> None:
    m = parse_money({"amount_minor": 1999, "asset": "USDC", "network": "base-mainnet"})
    assert m == Money(1999, "USDC", "base-mainnet")
    assert m.to_wire() == {"amount_minor": 1999, "asset": "USDC", "network": "base-mainnet"}


@pytest.mark.parametrize("amount", [1.0, 19.99, "1999", True, None, -1, MAX_UINT + 1, -(1 << 70)])
def test_amounts_that_are_not_a_cbor_uint_are_malformed(amount: object) -> None:
    assert _code({"amount_minor": amount, "asset": "USD", "network": "x"}) == 1001


def test_a_uint_beyond_what_the_ledger_holds_is_refused_by_policy() -> None:
    assert _code({"amount_minor": MAX_AMOUNT + 1, "asset": "USD", "network": "x"}) == 4104
    assert _code({"amount_minor": MAX_UINT, "asset": "USD", "network": "x"}) == 4104
    assert parse_money({"amount_minor": MAX_AMOUNT, "asset": "USD", "network": "x"}).amount_minor == MAX_AMOUNT


@pytest.mark.parametrize("asset", ["usd", "Usd", "", "A" * 33, "US D", "USD$", "ÜSD"])
def test_non_canonical_assets_are_4001(asset: str) -> None:
    assert _code({"amount_minor": 1, "asset": asset, "network": "x"}) == 4001


@pytest.mark.parametrize("network", ["Base-Mainnet", "", "n" * 65, "base mainnet"])
def test_non_canonical_networks_are_4001(network: str) -> None:
    assert _code({"amount_minor": 1, "asset": "USD", "network": network}) == 4001


def test_shape_comes_before_canonical_form() -> None:
    # §8 precedence: a float amount beside a lowercase asset is 1001, not 4001.
    assert _code({"amount_minor": 1.5, "asset": "usd", "network": "x"}) == 1001
    assert _code({"asset": "usd", "network": "x"}) == 1001
    assert _code({"amount_minor": 1, "asset": 5, "network": "x"}) == 1001
    assert _code([1, "USD", "x"]) == 1001


def test_comparison_is_byte_exact() -> None:
    a = Money(1, "USD.E", "n")
    assert not a.same_denomination(Money(1, "USD-E", "n"))
    assert a.same_denomination(Money(7, "USD.E", "n"))
