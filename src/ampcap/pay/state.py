"""What the payee keeps per payment, and the narrow protocol the state
store implements for it (store/payments.py, R19/R25).

The engine plans against a :class:`PaymentView` (reads that miss no write:
the store is the record) and hands back a :class:`Plan`: the decision, the
payment record to write, the §5.9 ``op_key`` row to add and the ledger
movements. :meth:`PaymentState.apply` commits a plan in one transaction,
and only if nothing moved underneath it: the record's ``version`` is what
the plan read (a conditional update, checked by rowcount), the ``op_key``
row is new, every debit finds its balance, every movement's entry is new.
Otherwise nothing is written and ``apply`` returns False; the engine plans
again from what is now stored. So two workers that race a capture against
a cancel on one payment cannot both win, and money never moves twice.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from .codes import Decision
from .lifecycle import State
from .money import Money
from .settlement import Account, Movement

__all__ = ["PaymentRecord", "OpRecord", "Plan", "PaymentView", "PaymentState"]


class PaymentRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One payment intent's lifecycle (§7) as the payee holds it."""

    payment_id: bytes
    payer: str
    payee: str
    quote_id: bytes
    money: Money  # the quoted terms: immutable after authorization (§4.2)
    quote_expires_at: int
    state: State
    authorized: int = 0  # amount held for capture
    captured: int = 0
    refunded: int = 0
    reason_code: int | None = None  # why a failed payment failed
    settlement: bytes | None = None  # CBOR of the capture's settlement proof
    refund_settlement: bytes | None = None
    session_id: bytes | None = None
    service_ref: str | None = None
    version: int = 0  # 0: not stored yet; the store writes version 1 as an insert
    updated_at: int = 0


class OpRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A §5.9 ``op_key`` (payment_id, op, from_did) and what it answered."""

    payment_id: bytes
    op: str
    sender: str
    digest: bytes  # of the semantic body (bodies.semantic_digest)
    result: bytes  # deterministic CBOR of the response body


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    decision: Decision
    record: PaymentRecord | None = None  # to write; its version is the stored one + 1
    operation: OpRecord | None = None
    movements: tuple[Movement, ...] = ()
    transitions: tuple[State, ...] = ()  # the §7 states passed through, in order

    @property
    def writes(self) -> bool:
        return self.record is not None or self.operation is not None or bool(self.movements)


class PaymentView(Protocol):
    def payment(self, payment_id: bytes) -> PaymentRecord | None: ...

    def operation(self, payment_id: bytes, op: str, sender: str) -> OpRecord | None: ...

    def balance(self, account: Account) -> int: ...


class PaymentState(PaymentView, Protocol):
    def apply(self, plan: Plan) -> bool:
        """Commit ``plan`` atomically if what it read still holds; False otherwise."""
        ...
