"""The payer's checks (RFC 007 §2.2), against the real payee: quote terms
and expiry before authorizing, the settlement proof of a capture_result
(A.5a: malformed 1001; A.5b: binding or signature 3001)."""

from __future__ import annotations

from typing import Any

import pytest

from ampcap.errors import AmpError
from ampcap.pay.money import Money
from ampcap.pay.payer import (authorize_body, capture_body, check_quote, check_settled, new_payment_id, op_body,
                              quote_request_body)
from ampcap.wire.identity import Identity

from .conftest import NET, T0, World

M = Money(400, "USD", NET)


def _buy(world: World) -> tuple[Any, dict[str, Any]]:
    pid = new_payment_id(lambda n: b"\x05" * n)
    request = quote_request_body(pid, world.payee_did, M)
    quote = check_quote(world.send(request).result, request, now_ms=T0)
    assert world.send(authorize_body(quote)).result["status"] == "authorized"
    return quote, world.send(capture_body(quote)).result


def test_a_full_purchase_verifies_its_settlement(world: World) -> None:
    quote, result = _buy(world)
    proof = check_settled(result, payment_id=quote.payment_id, money=M, keys=world.ledger.keys)
    assert proof is not None and proof.final
    status = world.send(op_body("status_query", quote.payment_id)).result
    assert status["status"] == "settled"


def test_the_payer_refuses_a_quote_it_did_not_ask_for_or_that_expired(world: World) -> None:
    pid = bytes(16)
    request = quote_request_body(pid, world.payee_did, M)
    quote = world.send(request).result
    with pytest.raises(AmpError) as err:
        check_quote({**quote, "money": Money(401, "USD", NET).to_wire()}, request, now_ms=T0)
    assert err.value.code == 4001
    with pytest.raises(AmpError) as err:
        check_quote(quote, request, now_ms=quote["quote_expires_at"] + 1)
    assert err.value.code == 4102
    with pytest.raises(AmpError) as err:
        check_quote({**quote, "quote_id": 5}, request, now_ms=T0)
    assert err.value.code == 1001


def test_a5a_a_malformed_settlement_is_1001(world: World) -> None:
    quote, result = _buy(world)
    broken = {**result, "settlement": {**result["settlement"], "sig": "not bytes"}}
    with pytest.raises(AmpError) as err:
        check_settled(broken, payment_id=quote.payment_id, money=M, keys=world.ledger.keys)
    assert err.value.code == 1001 and err.value.path == "result.settlement.sig"


def test_a5b_a_settlement_bound_elsewhere_or_badly_signed_is_3001(world: World) -> None:
    quote, result = _buy(world)
    for payment_id, money, keys in ((b"\x09" * 16, M, world.ledger.keys),
                                    (quote.payment_id, Money(399, "USD", NET), world.ledger.keys),
                                    (quote.payment_id, M, lambda did: Identity.from_seed(b"\x44" * 32).public_key),
                                    (quote.payment_id, M, lambda did: None)):
        with pytest.raises(AmpError) as err:
            check_settled(result, payment_id=payment_id, money=money, keys=keys)
        assert err.value.code == 3001
