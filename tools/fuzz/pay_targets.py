"""Fuzz target for RFC 007 payment bodies (registered in ``targets.py``,
whose rules it follows: state rebuilt per input).

* ``payment``: the first byte picks the sender (the payer, a stranger) and
  whether a payment already exists (quoted, or authorized); the rest is
  any CBOR item as the workflow's ``params``, handed to the payee's engine
  over a real in-memory state store and the local ledger. Whatever the
  params, ``handle`` returns exactly one of the three decisions (never
  raises), an answer encodes as deterministic CBOR, and the ledger's
  balances of an asset always sum to zero: money is never made or lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cbor2

from ampcap.pay.codes import Answered, ExecutionFailed, Rejected
from ampcap.pay.ledger import LocalLedger
from ampcap.pay.money import Money
from ampcap.pay.payee import Payee, handle
from ampcap.store.database import StateStore
from ampcap.store.payments import PaymentStore
from ampcap.wire.cbor import dumps
from ampcap.wire.identity import Identity

NOW = 1_800_000_000_000
PAYEE = Identity.from_seed(bytes([21]) * 32)
PAYER, STRANGER = "did:example:payer", "did:example:stranger"
NET = "ampcap-local-ledger"
PID = bytes(16)


def _params(raw: bytes) -> Any:
    try:
        return cbor2.loads(raw)
    except Exception:
        return {"pay_v": 1, "op": "status_query", "payment_id": raw[:16]}


def payment(data: bytes) -> None:
    mode = data[0] if data else 0
    store = StateStore.open(None)
    try:
        state = PaymentStore(store)
        ledger = LocalLedger(PAYEE)
        payee = Payee(PAYEE.did, ledger, quote_ttl_ms=60_000)
        assert state.deposit(ledger.deposit("fund", PAYER, Money(1_000, "USD", NET)))
        if mode & 2:  # a quoted payment under PID, authorized with mode & 4
            quote = {"pay_v": 1, "op": "quote_request", "payment_id": PID, "payee": PAYEE.did,
                     "money": {"amount_minor": 300, "asset": "USD", "network": NET}}
            decision, _ = handle(payee, quote, sender=PAYER, now_ms=NOW, state=state)
            assert isinstance(decision, Answered)
            if mode & 4:
                r = decision.result
                auth = {"pay_v": 1, "op": "authorize", "payment_id": PID, "quote_id": r["quote_id"],
                        "payer": PAYER, "payee": PAYEE.did, "money": r["money"]}
                assert isinstance(handle(payee, auth, sender=PAYER, now_ms=NOW, state=state)[0], Answered)
        sender = STRANGER if mode & 1 else PAYER
        decision, _ = handle(payee, _params(data[1:]), sender=sender, now_ms=NOW + (mode >> 3) * 10_000,
                             state=state, envelope_session=bytes(16) if mode & 8 else None)
        assert isinstance(decision, (Answered, Rejected, ExecutionFailed))
        if isinstance(decision, Answered):
            dumps(decision.result)
        totals: dict[tuple[str, str], int] = {}
        for owner, asset, network, balance in store.query("SELECT owner, asset, network, balance FROM ledger_balances"):
            totals[(asset, network)] = totals.get((asset, network), 0) + int(balance)
        assert all(total == 0 for total in totals.values()), totals
    finally:
        store.close()


def _seeds_payment() -> Iterator[bytes]:
    money = {"amount_minor": 300, "asset": "USD", "network": NET}
    bodies = [
        {"pay_v": 1, "op": "quote_request", "payment_id": bytes(range(16)), "payee": PAYEE.did, "money": money},
        {"pay_v": 1, "op": "status_query", "payment_id": PID},
        {"pay_v": 1, "op": "capture", "payment_id": PID, "quote_id": bytes(16), "money": money},
        {"pay_v": 1, "op": "cancel", "payment_id": PID, "reason": "x"},
        {"pay_v": 1, "op": "refund", "payment_id": PID},
        {"pay_v": 2, "op": "status_query", "payment_id": PID},
        {"pay_v": 1, "op": "quote_request", "payment_id": PID, "payee": PAYEE.did,
         "money": {"amount_minor": 2**64 - 1, "asset": "usd", "network": NET}},
    ]
    for mode in (0, 1, 2, 6, 7, 14):
        for body in bodies:
            yield bytes([mode]) + cbor2.dumps(body)


def pay_targets(target: Any) -> dict[str, Any]:
    return {"payment": target(payment, _seeds_payment, max_len=1024)}
