"""§5.11 request bodies read from CAP_INVOKE params, in the §8 order."""

from __future__ import annotations

from typing import Any

import pytest

from ampcap.errors import AmpError
from ampcap.pay.bodies import (Authorize, Capture, QuoteRequest, Refund, is_payment_control, parse_request,
                               semantic_digest)

PID = bytes(16)


def body(**over: Any) -> dict[str, Any]:
    out = {"pay_v": 1, "op": "quote_request", "payment_id": PID, "payee": "did:example:b",
           "money": {"amount_minor": 5, "asset": "USD", "network": "n"}}
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def code(params: Any) -> tuple[int, str | None]:
    with pytest.raises(AmpError) as err:
        parse_request(params)
    return err.value.code, err.value.path


def test_each_request_op_reads_into_its_type() -> None:
    assert isinstance(parse_request(body()), QuoteRequest)
    auth = parse_request({"pay_v": 1, "op": "authorize", "payment_id": PID, "quote_id": b"q" * 16, "payer": "a",
                          "payee": "b", "money": {"amount_minor": 5, "asset": "USD", "network": "n"}})
    assert isinstance(auth, Authorize) and auth.quote_id == b"q" * 16
    cap = parse_request({"pay_v": 1, "op": "capture", "payment_id": PID, "quote_id": b"q" * 16,
                         "money": {"amount_minor": 5, "asset": "USD", "network": "n"}})
    assert isinstance(cap, Capture)
    refund = parse_request({"pay_v": 1, "op": "refund", "payment_id": PID})
    assert isinstance(refund, Refund) and refund.money is None
    assert parse_request({"pay_v": 1, "op": "status_query", "payment_id": PID}).op == "status_query"


def test_the_dispatch_guard_needs_pay_v() -> None:
    # A.9: a business op without pay_v is not payment-control.
    assert not is_payment_control({"op": "capture", "payment_id": PID})
    assert is_payment_control({"pay_v": 1, "op": "capture"})
    assert not is_payment_control([1, 2])


@pytest.mark.parametrize(("params", "expected"), [
    ("not a map", (1001, "params")),
    (body(pay_v=None), (1001, "params.pay_v")),
    (body(pay_v="1"), (1001, "params.pay_v")),
    (body(pay_v=2), (1004, "params.pay_v")),
    (body(op=None), (1001, "params.op")),
    (body(op=7), (1001, "params.op")),
    (body(payment_id=b"short"), (1001, "params.payment_id")),
    (body(payment_id="00" * 16), (1001, "params.payment_id")),
    (body(op="refund_everything"), (4105, "params.op")),
    (body(op="capture_result"), (4001, "params.op")),
    (body(payee=None), (1001, "params.payee")),
    (body(money={"amount_minor": 5, "asset": "usd", "network": "n"}), (4001, "params.money.asset")),
    (body(money={"amount_minor": -5, "asset": "USD", "network": "n"}), (1001, "params.money.amount_minor")),
    (body(session={"session_id": PID}), (1001, "params.session.session_scope")),
    (body(service_ref="x" * 5000), (1001, "params.service_ref")),
])
def test_faults_get_the_rfc_codes_in_precedence_order(params: Any, expected: tuple[int, str]) -> None:
    assert code(params) == expected


def test_pay_v_is_checked_before_the_op() -> None:
    # Unsupported pay_v (1004) outranks an unknown op (4105).
    assert code(body(pay_v=9, op="nonsense"))[0] == 1004


def test_unknown_optional_keys_are_ignored_and_not_semantic() -> None:
    plain = parse_request(body())
    extra = parse_request(body(x_vendor_hint="anything"))
    assert semantic_digest(plain) == semantic_digest(extra)
    changed = parse_request(body(money={"amount_minor": 6, "asset": "USD", "network": "n"}))
    assert semantic_digest(plain) != semantic_digest(changed)
