"""The payer's side of the CAP path, sans-I/O: the request bodies it sends
and the checks it makes on what comes back (RFC 007 §2.2 payer profile).

* :func:`new_payment_id`: one stable ``payment_id`` per intent (reuse it on
  every retry: §5.9 makes the retry idempotent);
* :func:`check_quote`: the quote is the one asked for (payment, payee,
  money: 4001 otherwise) and still valid (4102), before authorizing;
* :func:`authorize_body`, :func:`capture_body`, :func:`op_body`: the
  §5.11 bodies, built from the checked quote so the terms cannot drift;
* :func:`check_settled`: a ``capture_result``/``refund_result``'s
  settlement proof, verified per §6.1 under the payer's adapter trust
  (A.5a: malformed 1001; A.5b: binding or signature 3001).

``ampcap.net.api.payments.Payer`` and ``ampcap pay`` send these over CAP_INVOKE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ..errors import AmpError
from .bodies import PAY_V
from .codes import BAD_REQUEST, MALFORMED, QUOTE_EXPIRED
from .money import Money, parse_money
from .settlement import AdapterKeys, SettlementProof, parse_proof, verify_proof

__all__ = ["Quote", "new_payment_id", "quote_request_body", "check_quote", "authorize_body", "capture_body",
           "op_body", "check_settled"]


class Quote(msgspec.Struct, frozen=True, kw_only=True):
    payment_id: bytes
    quote_id: bytes
    payer: str
    payee: str
    money: Money
    expires_at: int


def new_payment_id(entropy: Callable[[int], bytes]) -> bytes:
    payment_id = entropy(16)
    if len(payment_id) != 16:
        raise AmpError(5001, "entropy source returned the wrong number of bytes")
    return payment_id


def quote_request_body(payment_id: bytes, payee: str, money: Money, *, service_ref: str | None = None
                       ) -> dict[str, Any]:
    body: dict[str, Any] = {"pay_v": PAY_V, "op": "quote_request", "payment_id": payment_id, "payee": payee,
                            "money": money.to_wire()}
    if service_ref is not None:
        body["service_ref"] = service_ref
    return body


def _field(result: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    value = result.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise AmpError(MALFORMED, f"{key} missing or not a {kind.__name__}", path=f"{path}.{key}")
    return value


def check_quote(result: Any, request: Mapping[str, Any], *, now_ms: int, path: str = "result") -> Quote:
    """The payee's ``quote`` for ``request`` (a body from :func:`quote_request_body`)."""
    if not isinstance(result, Mapping) or result.get("op") != "quote" or result.get("pay_v") != PAY_V:
        raise AmpError(MALFORMED, "expected a pay_v 1 quote body", path=path)
    quote_id = _field(result, "quote_id", bytes, path)
    if len(quote_id) != 16:
        raise AmpError(MALFORMED, "quote_id must be 16 bytes", path=f"{path}.quote_id")
    quote = Quote(payment_id=_field(result, "payment_id", bytes, path), quote_id=quote_id,
                  payer=_field(result, "payer", str, path), payee=_field(result, "payee", str, path),
                  money=parse_money(result.get("money"), f"{path}.money"),
                  expires_at=_field(result, "quote_expires_at", int, path))
    if quote.payment_id != request["payment_id"] or quote.payee != request["payee"]:
        raise AmpError(BAD_REQUEST, "the quote is for another payment or payee", path=path)
    if quote.money != parse_money(request["money"]):
        raise AmpError(BAD_REQUEST, "the quote's money differs from the money asked for", path=f"{path}.money")
    if now_ms > quote.expires_at:
        raise AmpError(QUOTE_EXPIRED, "the quote expired", path=f"{path}.quote_expires_at")
    return quote


def authorize_body(quote: Quote) -> dict[str, Any]:
    return {"pay_v": PAY_V, "op": "authorize", "payment_id": quote.payment_id, "quote_id": quote.quote_id,
            "payer": quote.payer, "payee": quote.payee, "money": quote.money.to_wire()}


def capture_body(quote: Quote, amount_minor: int | None = None) -> dict[str, Any]:
    money = quote.money if amount_minor is None else quote.money.with_amount(amount_minor)
    return {"pay_v": PAY_V, "op": "capture", "payment_id": quote.payment_id, "quote_id": quote.quote_id,
            "money": money.to_wire()}


def op_body(op: str, payment_id: bytes, **fields: Any) -> dict[str, Any]:
    """``cancel``, ``refund`` (``money=Money``), ``status_query``."""
    body: dict[str, Any] = {"pay_v": PAY_V, "op": op, "payment_id": payment_id}
    for key, value in fields.items():
        if value is not None:
            body[key] = value.to_wire() if isinstance(value, Money) else value
    return body


def check_settled(result: Any, *, payment_id: bytes, money: Money, keys: AdapterKeys,
                  path: str = "result") -> SettlementProof | None:
    """The verified settlement proof of a capture or refund result (None
    when the result carries none). Verified before the payer treats the
    payment as ``settled``/``refunded`` (§10)."""
    if not isinstance(result, Mapping):
        raise AmpError(MALFORMED, "result must be a map", path=path)
    if "settlement" not in result:
        return None
    proof = parse_proof(result["settlement"], f"{path}.settlement")
    verify_proof(proof, payment_id=payment_id, money=money, keys=keys, path=f"{path}.settlement")
    return proof
