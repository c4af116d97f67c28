"""The payee of RFC 007 on the CAP path: one request in, one decision out.

:class:`Payee` plans a request against the stored state (:meth:`Payee.plan`,
pure); :func:`handle` is the loop an edge runs: parse, plan, commit, and
plan again when another worker changed the payment first. The decision is
:class:`~.codes.Rejected` (AMP ERROR), :class:`~.codes.Answered`
(CAP_RESULT success) or :class:`~.codes.ExecutionFailed` (CAP_RESULT
error), per A.21 (see :mod:`.codes`).

Order of checks for every op: the §5.9 replay table first (same
``op_key``, same semantic body: the recorded answer, no transition;
different body: 4001), then the payment (4106 unknown), the actor (3001:
only the payer acts on a payment, and ``payer`` in a body must be the
sender or the principal a verified delegation names), the terms (4001:
quote tampering, capture beyond the authorization), the state (4103, or
4102 for an expired quote), then the adapter. Nothing is written for a
rejection, except the expiry of a quote: §7 makes that ``quoted ->
failed``, and it is a fact of time, not of the request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.cbor import dumps, loads
from .bodies import (Authorize, Cancel, Capture, PaymentRequest, QuoteRequest, Refund, StatusQuery,
                     parse_request, response_base, semantic_digest)
from .codes import (BAD_REQUEST, INSUFFICIENT_FUNDS, INTERNAL, INVALID_TRANSITION, PAYMENT_NOT_FOUND,
                    QUOTE_EXPIRED, UNAUTHORIZED, UNSUPPORTED_ASSET, Answered, Decision, ExecutionFailed,
                    Rejected)
from .lifecycle import Event, State, advance
from .money import Money
from .settlement import InsufficientFunds, Movement, SettlementAdapter, SettlementUnavailable
from .state import OpRecord, PaymentRecord, PaymentState, PaymentView, Plan

__all__ = ["Payee", "QuotePolicy", "handle", "first_plan", "store_failed", "DEFAULT_QUOTE_TTL_MS", "MAX_ATTEMPTS"]

DEFAULT_QUOTE_TTL_MS = 300_000
MAX_ATTEMPTS = 16  # plans lost to concurrent writers before 5001

# A payee's pricing: the money it asks for a quote request (which proposes
# one), or AmpError (4104: not for sale in that asset). Default: as proposed.
QuotePolicy = Callable[[QuoteRequest], Money]


def _next_version(record: PaymentRecord | None, read: PaymentRecord | None) -> PaymentRecord | None:
    """The record to write, one version past the one the plan read (the
    store's conditional update checks that version is still there)."""
    if record is None:
        return None
    return msgspec.structs.replace(record, version=(read.version if read is not None else 0) + 1)


def _reject(code: int, message: str, path: str | None = None) -> Plan:
    return Plan(decision=Rejected(code, message, path))


class Payee:
    def __init__(self, own_did: str, adapter: SettlementAdapter, *, quote_ttl_ms: int = DEFAULT_QUOTE_TTL_MS,
                 price: QuotePolicy | None = None) -> None:
        self.own_did = own_did
        self.adapter = adapter
        self.quote_ttl_ms = quote_ttl_ms
        self.price = price

    # ------------------------------------------------------------ planning

    def plan(self, request: PaymentRequest, *, sender: str, now_ms: int, view: PaymentView,
             acting_for: str | None = None, envelope_session: bytes | None = None) -> Plan:
        """What ``request`` from ``sender`` does now. ``acting_for``: the
        principal a verified RFC 005 chain says the sender acts for (the CAP
        layer checked it, 3004 otherwise); ``envelope_session``: the
        CAP_INVOKE body's session id, the source of truth (§5.10)."""
        if (envelope_session is not None and request.session is not None
                and request.session.session_id != envelope_session):
            return _reject(BAD_REQUEST, "params.session differs from the envelope's session", "params.session")
        if isinstance(request, StatusQuery):  # read-only, retried freely: no op_key, no digest
            known = view.payment(request.payment_id)
            if known is None:
                return _reject(PAYMENT_NOT_FOUND, "no payment with this payment_id", "params.payment_id")
            return self._status(request, known, sender, now_ms, acting_for)
        digest = semantic_digest(request)
        prior = view.operation(request.payment_id, request.op, sender)
        if prior is not None:
            if prior.digest != digest:
                return _reject(BAD_REQUEST, f"conflicting replay of {request.op} for this payment "
                                            f"(same op_key, different body)", "params")
            record = view.payment(request.payment_id)
            if isinstance(request, Refund) and record is not None:
                # §5.9: a refund replay answers the *latest* refund_result.
                return Plan(decision=Answered(self._refund_result(request, record), replayed=True))
            return Plan(decision=Answered(loads(prior.result), replayed=True))
        record = view.payment(request.payment_id)
        if isinstance(request, QuoteRequest):
            session = envelope_session or (request.session.session_id if request.session else None)
            return self._quote(request, record, sender, now_ms, digest, acting_for, session)
        if record is None:
            return _reject(PAYMENT_NOT_FOUND, "no payment with this payment_id", "params.payment_id")
        if not self._is_payer(record, sender, acting_for):
            return _reject(UNAUTHORIZED, "only the payer acts on this payment")
        if isinstance(request, Authorize):
            return self._authorize(request, record, sender, now_ms, digest, view, acting_for)
        if isinstance(request, Capture):
            return self._capture(request, record, sender, now_ms, digest)
        if isinstance(request, Cancel):
            return self._cancel(request, record, sender, now_ms, digest)
        assert isinstance(request, Refund)
        return self._refund(request, record, sender, now_ms, digest, view)

    @staticmethod
    def _is_payer(record: PaymentRecord, sender: str, acting_for: str | None) -> bool:
        return record.payer in (sender, acting_for)

    def _answer(self, request: PaymentRequest, sender: str, digest: bytes, result: dict[str, Any], *,
                read: PaymentRecord | None, record: PaymentRecord, transitions: tuple[State, ...] = (),
                movements: tuple[Movement, ...] = ()) -> Plan:
        op = OpRecord(payment_id=request.payment_id, op=request.op, sender=sender, digest=digest,
                      result=dumps(result))
        return Plan(decision=Answered(result), record=_next_version(record, read), operation=op,
                    movements=movements, transitions=transitions)

    def _quote(self, request: QuoteRequest, record: PaymentRecord | None, sender: str, now_ms: int,
               digest: bytes, acting_for: str | None, session_id: bytes | None) -> Plan:
        if request.payee != self.own_did:
            return _reject(BAD_REQUEST, "quote_request names another payee", "params.payee")
        if record is not None:
            return _reject(BAD_REQUEST, "payment_id already names a payment intent", "params.payment_id")
        try:
            money = self.price(request) if self.price is not None else request.money
        except AmpError as exc:
            return _reject(exc.code, exc.message, exc.path)
        if money.amount_minor == 0:
            return _reject(BAD_REQUEST, "a payment needs an amount above zero", "params.money.amount_minor")
        if not self.adapter.supports(money):
            return _reject(UNSUPPORTED_ASSET, f"{money.asset} on {money.network} is not accepted here",
                           "params.money")
        payer = acting_for or sender
        quote_id = hashlib.sha256(b"ampcap-quote-v1\0" + self.own_did.encode() + b"\0" + request.payment_id
                                  + digest).digest()[:16]
        expires = now_ms + self.quote_ttl_ms
        new = PaymentRecord(payment_id=request.payment_id, payer=payer, payee=self.own_did, quote_id=quote_id,
                            money=money, quote_expires_at=expires, state=State.QUOTED,
                            session_id=session_id,
                            service_ref=request.service_ref, updated_at=now_ms)
        result = {**response_base(request), "quote_id": quote_id, "payee": self.own_did, "payer": payer,
                  "money": money.to_wire(), "quote_expires_at": expires}
        return self._answer(request, sender, digest, result, read=None, record=new, transitions=(State.QUOTED,))

    def _authorize(self, request: Authorize, record: PaymentRecord, sender: str, now_ms: int, digest: bytes,
                   view: PaymentView, acting_for: str | None) -> Plan:
        if request.payer not in (sender, acting_for) or request.payer != record.payer:
            return _reject(UNAUTHORIZED, "authorize.payer is not the sender", "params.payer")
        if request.payee != self.own_did:
            return _reject(BAD_REQUEST, "authorize names another payee", "params.payee")
        if request.quote_id != record.quote_id or request.money != record.money:
            return _reject(BAD_REQUEST, "authorize does not match the quote's terms", "params.quote_id")
        if record.state is State.FAILED and record.reason_code == QUOTE_EXPIRED:
            return _reject(QUOTE_EXPIRED, "the quote expired")
        if record.state is not State.QUOTED:
            return _reject(INVALID_TRANSITION, f"authorize is not valid in state {record.state.value!r}")
        if now_ms > record.quote_expires_at:
            expired = _step(record, Event.QUOTE_EXPIRED, now_ms, reason_code=QUOTE_EXPIRED)
            return Plan(decision=Rejected(QUOTE_EXPIRED, "the quote expired"), record=_next_version(expired, record),
                        transitions=(expired.state,))
        base = response_base(request)
        try:
            settlement = self.adapter.reserve(record.payment_id, record.payer, record.money, view.balance)
        except InsufficientFunds:
            failed = _step(record, Event.AUTHORIZE_FAILED, now_ms, reason_code=INSUFFICIENT_FUNDS)
            result = {**base, "status": "failed", "reason_code": INSUFFICIENT_FUNDS, "reason": "insufficient funds"}
            return self._answer(request, sender, digest, result, read=record, record=failed,
                                transitions=(failed.state,))
        done = _step(record, Event.AUTHORIZED, now_ms, authorized=record.money.amount_minor)
        result = {**base, "status": "authorized", "authorized_at": now_ms}
        return self._answer(request, sender, digest, result, read=record, record=done, transitions=(done.state,),
                            movements=settlement.movements)

    def _capture(self, request: Capture, record: PaymentRecord, sender: str, now_ms: int, digest: bytes) -> Plan:
        if request.quote_id != record.quote_id:
            return _reject(BAD_REQUEST, "capture names another quote", "params.quote_id")
        if not request.money.same_denomination(record.money):
            return _reject(BAD_REQUEST, "capture asset/network differ from the authorization", "params.money")
        if record.state is not State.AUTHORIZED:
            # §5.4: capture before authorization (or after the end) fails deterministically.
            return _reject(INVALID_TRANSITION, f"capture is not valid in state {record.state.value!r}")
        amount = request.money.amount_minor
        if amount == 0 or amount > record.authorized:
            return _reject(BAD_REQUEST, f"capture amount must be 1..{record.authorized} (the authorization)",
                           "params.money.amount_minor")
        held = record.money.with_amount(record.authorized)
        settlement = self.adapter.capture(record.payment_id, record.payer, record.payee, held, request.money, now_ms)
        proof = settlement.proof
        final = proof is not None and proof.final
        done = _step(record, Event.CAPTURED_SETTLED if final else Event.CAPTURED, now_ms, captured=amount,
                     authorized=0, settlement=dumps(proof.to_wire()) if proof is not None else None)
        result: dict[str, Any] = {**response_base(request), "status": done.state.value}
        if proof is not None:
            result["settlement"] = proof.to_wire()
        return self._answer(request, sender, digest, result, read=record, record=done, transitions=(done.state,),
                            movements=settlement.movements)

    def _cancel(self, request: Cancel, record: PaymentRecord, sender: str, now_ms: int, digest: bytes) -> Plan:
        if record.state not in (State.QUOTED, State.AUTHORIZED):
            return _reject(INVALID_TRANSITION, f"cancel is not valid in state {record.state.value!r}")
        movements: tuple[Movement, ...] = ()
        if record.state is State.AUTHORIZED:
            movements = self.adapter.release(record.payment_id, record.payer,
                                             record.money.with_amount(record.authorized)).movements
        done = _step(record, Event.CANCELED, now_ms, authorized=0)
        result = {**response_base(request), "status": "canceled"}
        return self._answer(request, sender, digest, result, read=record, record=done, transitions=(done.state,),
                            movements=movements)

    def _refund(self, request: Refund, record: PaymentRecord, sender: str, now_ms: int, digest: bytes,
                view: PaymentView) -> Plan:
        money = request.money or record.money.with_amount(record.captured)
        if not money.same_denomination(record.money):
            return _reject(BAD_REQUEST, "refund asset/network differ from the payment", "params.money")
        if record.state not in (State.CAPTURED, State.SETTLED):
            return _reject(INVALID_TRANSITION, f"refund is not valid in state {record.state.value!r}")
        if money.amount_minor == 0 or money.amount_minor > record.captured:
            return _reject(BAD_REQUEST, f"refund amount must be 1..{record.captured} (the capture)",
                           "params.money.amount_minor")
        pending = _step(record, Event.REFUND_PENDING, now_ms)
        try:
            settlement = self.adapter.refund(record.payment_id, record.payer, record.payee, money, now_ms,
                                             view.balance)
        except InsufficientFunds:
            failed = _step(pending, Event.REFUND_FAILED, now_ms, reason_code=INSUFFICIENT_FUNDS)
            return self._answer(request, sender, digest, self._refund_result(request, failed), read=record,
                                record=failed,
                                transitions=(pending.state, failed.state))
        proof = settlement.proof
        if proof is not None and proof.final:
            done = _step(pending, Event.REFUND_FINAL, now_ms, refunded=money.amount_minor,
                         refund_settlement=dumps(proof.to_wire()))
            transitions: tuple[State, ...] = (pending.state, done.state)
        else:
            done = msgspec.structs.replace(pending, refunded=money.amount_minor,
                                           refund_settlement=dumps(proof.to_wire()) if proof else None)
            transitions = (pending.state,)
        return self._answer(request, sender, digest, self._refund_result(request, done), read=record, record=done,
                            transitions=transitions, movements=settlement.movements)

    @staticmethod
    def _refund_result(request: PaymentRequest, record: PaymentRecord) -> dict[str, Any]:
        """The latest refund_result for a record in or past refund_pending."""
        status = record.state.value if record.state in (State.REFUND_PENDING, State.REFUNDED) else "failed"
        result: dict[str, Any] = {**response_base(request), "status": status}
        if record.refund_settlement is not None:
            result["settlement"] = loads(record.refund_settlement)
        if status == "failed" and record.reason_code is not None:
            result["reason_code"] = record.reason_code
        return result

    def _status(self, request: StatusQuery, record: PaymentRecord, sender: str, now_ms: int,
                acting_for: str | None) -> Plan:
        if sender != record.payee and not self._is_payer(record, sender, acting_for):
            return _reject(UNAUTHORIZED, "only the payer and the payee may ask for a payment's status")
        state = record.state
        if state is State.QUOTED and now_ms > record.quote_expires_at:
            state = State.FAILED  # expired: what an authorize would now find (read-only here)
        result: dict[str, Any] = {**response_base(request), "status": state.value, "updated_at": record.updated_at}
        proof = record.refund_settlement or record.settlement
        if proof is not None:
            result["settlement"] = loads(proof)
        return Plan(decision=Answered(result))


def _step(record: PaymentRecord, event: Event, now_ms: int, **changes: Any) -> PaymentRecord:
    """The record after ``event`` (the §7 table decides; 4103 otherwise)."""
    return msgspec.structs.replace(record, state=advance(record.state, event), updated_at=now_ms, **changes)


def first_plan(payee: Payee, request: PaymentRequest, *, sender: str, now_ms: int, view: PaymentView,
               acting_for: str | None = None, envelope_session: bytes | None = None) -> Plan | Decision:
    """One planning step of :func:`handle`: the plan, or the decision when
    planning itself ended the request (a rejection, an adapter that is down)."""
    try:
        return payee.plan(request, sender=sender, now_ms=now_ms, view=view, acting_for=acting_for,
                          envelope_session=envelope_session)
    except SettlementUnavailable as exc:
        return ExecutionFailed(SettlementUnavailable.code, f"settlement adapter unavailable: {exc}")
    except AmpError as exc:
        if exc.code >= 5000:
            return ExecutionFailed(exc.code, exc.message)
        return Rejected(exc.code, exc.message, exc.path)


def store_failed(exc: Exception) -> ExecutionFailed:
    """The decision when committing a plan raised (nothing was written)."""
    if isinstance(exc, AmpError):
        return ExecutionFailed(exc.code if exc.code >= 5000 else INTERNAL, exc.message)
    # The store's own failure (a locked file, a lost server): rolled back.
    return ExecutionFailed(INTERNAL, f"payment state unavailable ({type(exc).__name__})")


def handle(payee: Payee, params: Any, *, sender: str, now_ms: int, state: PaymentState,
           acting_for: str | None = None, envelope_session: bytes | None = None,
           request: PaymentRequest | None = None, attempts: int = MAX_ATTEMPTS) -> tuple[Decision, Plan | None]:
    """One CAP_INVOKE of the payment workflow: the decision, and the plan
    that was committed (None for a rejection before planning). The edge
    turns the decision into bytes (net/features/payments.py: the executor's ERROR or
    CAP_RESULT). ``request``: ``params`` already parsed."""
    if request is None:
        try:
            request = parse_request(params)
        except AmpError as exc:
            return Rejected(exc.code, exc.message, exc.path), None
    for _ in range(attempts):
        plan = first_plan(payee, request, sender=sender, now_ms=now_ms, view=state, acting_for=acting_for,
                          envelope_session=envelope_session)
        if not isinstance(plan, Plan):
            return plan, None
        if not plan.writes:
            return plan.decision, plan
        try:
            committed = state.apply(plan)
        except Exception as exc:
            return store_failed(exc), None
        if committed:
            return plan.decision, plan
    return ExecutionFailed(INTERNAL, "the payment kept changing under this request; retry"), None
