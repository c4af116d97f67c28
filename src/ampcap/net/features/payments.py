"""The payee served: RFC 007's workflow capability and paid capabilities in
a daemon (``ampcap serve --payments``, docs/payments.md).

The sans-I/O engine (:mod:`ampcap.pay.payee`) decides; this module is its
edge. It hands the daemon capability specs and in-process handlers, keyed
by capability id, like the Python API's capabilities: the executor runs
RFC 004 steps 1-7 (policy, delegation, version, schema) as for any
capability and then calls the handler with the params and a context that
carries the caller's DID, the delegation principal (the first delegator of
a verified RFC 005 chain) and the invoke's ``body.session``. So the
executor knows nothing of payments. The engine's three decisions (A.21)
become: ``Answered`` the handler's result (CAP_RESULT success),
``Rejected`` :class:`~ampcap.errors.NotExecuted` (AMP ERROR, as a step-7
rejection) and ``ExecutionFailed`` an :class:`AmpError` (CAP_RESULT error).

The engine commits to the state store before the handler returns, so the
terminal reply the journal seals afterwards always describes committed
state (R19); the workflow is declared ``idempotent``: an invoke a restart
interrupted runs again and §5.9 answers it from the ``op_key`` table.

Settlement is the local ledger (R26), keyed by the daemon's own identity.
``--demo`` (with ``--payments``) credits each new payer a demo balance on
its first quote, once per payer and asset (a deposit is idempotent by its
reference), so a demo payer can buy something without an operator.

A paid capability (a ``price`` here, any binding kind) requires
``params["$payment"]``, the ``payment_id`` of a payment to this daemon for
that capability that is captured or settled, whose payer is the caller (or
the principal it acts for), for at least the price; it is spent by the call
(:meth:`PaymentStore.consume`, a conditional insert: one payment buys one
call, even across daemons sharing the store; the same invoke run again after
a restart may spend it again). Otherwise: 3001, before the capability runs.
A manifest's priced capability is a *gate* in front of its own binding
(net/daemon/jobs.py): the daemon runs the binding on its one runner. An
invoke the journal closes as cut short (a restart, a dead worker, the drain)
has its spend deleted in that same commit (store/payments.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ...errors import AmpError, NotExecuted
from ...pay.bodies import PaymentRequest, QuoteRequest, parse_request
from ...pay.codes import (BAD_REQUEST, INVALID_TRANSITION, UNAUTHORIZED, UNSUPPORTED_ASSET, Answered, Decision,
                          Rejected)
from ...pay.ledger import LEDGER_NETWORK, LocalLedger
from ...pay.lifecycle import State
from ...pay.money import Money
from ...pay.payee import MAX_ATTEMPTS, Payee, first_plan, handle, store_failed
from ...pay.settlement import SettlementUnavailable
from ...pay.state import Plan
from ...pay.workflow import WORKFLOW_ID, capability_table
from ...store.payments import PaymentStore
from ..daemon.durable import after_apply, applying
from ..daemon.jobs import Later

__all__ = ["PaymentService", "PAYMENT_PARAM", "DEMO_CREDIT", "PAID_ECHO_ID", "PAID_ECHO_PRICE", "OFFLINE_NETWORK",
           "DemoLedger", "paid_echo_table"]

log = logging.getLogger("ampcap.daemon")

PAYMENT_PARAM = "$payment"  # the params key naming the payment a paid call spends
DEMO_CREDIT = Money(100_000, "USD", LEDGER_NETWORK)  # what --demo credits a new payer: 1000.00 USD
PAID_ECHO_ID = "org.ampcap.demo.paid_echo:1.0.0"
PAID_ECHO_PRICE = Money(500, "USD", LEDGER_NETWORK)

_PAID_STATES = (State.CAPTURED, State.SETTLED)
_BINDING = {"python": "ampcap.net.features.payments:_in_process_only"}


OFFLINE_NETWORK = "ampcap-offline-ledger"  # --demo: a network whose settlement is always down
_CREDITED_MAX = 100_000  # demo payers remembered as credited; beyond, forgotten (the store answers again)


class DemoLedger(LocalLedger):
    """The local ledger, plus (``--demo``) a network whose settlement is
    always unavailable: an authorization there is accepted and then fails
    (5002, CAP_RESULT error, nothing stored): A.21's second case, and what
    a payer sees when an adapter cannot complete a step (fails closed)."""

    def supports(self, money: Money) -> bool:
        return money.network == OFFLINE_NETWORK or super().supports(money)

    def reserve(self, payment_id: bytes, payer: str, money: Money, balance: Any) -> Any:
        if money.network == OFFLINE_NETWORK:
            raise SettlementUnavailable(f"{OFFLINE_NETWORK} is down (a demo network that never settles)")
        return super().reserve(payment_id, payer, money, balance)


def _in_process_only(params: Any) -> Any:  # pragma: no cover - the daemon's handler runs instead
    raise AmpError(5001, "served in process by the daemon's payment service")


def paid_echo_table() -> dict[str, Any]:
    """The demo's paid capability: echo, for 5.00 USD a call."""
    return {"name": "org.ampcap.demo.paid_echo", "version": "1.0.0", "binding": dict(_BINDING),
            "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                             "required": ["message", PAYMENT_PARAM], "additionalProperties": False,
                             "properties": {"message": {"type": "string", "maxLength": 4096},
                                            PAYMENT_PARAM: {"description": "payment_id (16-byte CBOR bstr, "
                                                            "or 32 hex digits)"}}},
            "output_schema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                              "required": ["message", "paid"],
                              "properties": {"message": {"type": "string"}, "paid": {"const": True}}},
            "notes": "Echo, for a captured payment of 5.00 USD (RFC 007 demo; docs/payments.md)."}


def _session_id(session: Any) -> bytes | None:
    if isinstance(session, Mapping):
        value = session.get("session_id")
        if isinstance(value, bytes):
            return value
    return None


def _payment_id(value: Any) -> bytes:
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value)
        except ValueError:
            value = None
    if not isinstance(value, bytes) or len(value) != 16:
        raise NotExecuted(BAD_REQUEST, f"{PAYMENT_PARAM} must be a payment_id (16 bytes, or 32 hex digits)",
                          path=f"params.{PAYMENT_PARAM}")
    return value


class PaymentService:
    """The workflow capability, the local ledger and the paid capabilities
    of one daemon, over its state store."""

    def __init__(self, identity: Any, store: Any, *, prices: Mapping[str, Money] | None = None,
                 demo_credit: Money | None = None, quote_ttl_ms: int | None = None,
                 priced: tuple[Any, ...] = ()) -> None:
        """``priced``: manifest capability specs with a ``price`` (any
        binding kind), served behind the payment check."""
        self.identity = identity
        self.state = PaymentStore(store)
        self.ledger = DemoLedger(identity) if demo_credit is not None else LocalLedger(identity)
        self.prices = dict(prices or {})
        self.priced = {spec.id: spec for spec in priced}
        for spec in priced:
            self.prices[spec.id] = Money(*spec.price)
        self.demo_credit = demo_credit
        self._credited: set[str] = set()  # demo deposits known committed (a bounded cache)
        self._batch: list[_Staged] = []  # workflow steps planned this turn of the loop (workflow_in_ticks)
        self._turn_busy = False  # a step of this turn of the daemon's batch has committed on the spot
        after_apply(store, f"payments:{id(self)}", self._commit_batch)  # one per service: none replaces another
        extra = {} if quote_ttl_ms is None else {"quote_ttl_ms": quote_ttl_ms}
        self.payee = Payee(identity.did, self.ledger, price=self._quote_price, **extra)

    # ---------------------------------------------------------- declaring

    def tables(self) -> list[dict[str, Any]]:
        """The ``[[capability]]`` tables to serve: the workflow, and the demo's paid echo when priced."""
        tables = [capability_table(dict(_BINDING))]
        if PAID_ECHO_ID in self.prices:
            tables.append(paid_echo_table())
        return tables

    def manifest(self) -> Any:
        """The tables as a manifest whose descriptors the daemon's identity signs."""
        from ...caps.descriptor_signing import sign_manifest
        from ...caps.manifest import manifest_from_data

        data = {"bundle_id": "org.agentries.payment", "capability": self.tables()}
        return sign_manifest(manifest_from_data(data, source="<payments>"), self.identity)

    def handlers(self) -> dict[str, Any]:
        """In-process handlers by capability id, plain functions marked
        ``inline``: the daemon calls them on the spot, with no task (they
        never wait). The workflow's steps commit once per turn of the loop
        (:meth:`workflow_in_ticks`); a paid call's spend is one transaction.
        A priced manifest capability's handler is a gate (:meth:`_paid_binding`)."""
        out: dict[str, Any] = {WORKFLOW_ID: _inline(self.workflow_in_ticks)}
        if PAID_ECHO_ID in self.prices:
            out[PAID_ECHO_ID] = _inline(self.paying(PAID_ECHO_ID, _paid_echo))
        for spec in self.priced.values():
            out[spec.id] = self._paid_binding(spec)
        return out

    def _paid_binding(self, spec: Any) -> Any:
        """A manifest capability with a price: a gate (net/daemon/jobs.py)
        that spends the payment; then the daemon runs the capability's own
        binding (python, command, MCP, HTTP, gRPC or several in order) as
        for any capability, on its one runner (its MCP sessions, its pools)."""
        capability_id, price = spec.id, self.prices[spec.id]

        def gate(params: Any, ctx: Any) -> Any:
            return self.spend(capability_id, price, params, ctx)

        gate.gate = True  # type: ignore[attr-defined]
        return gate

    # ---------------------------------------------------------- the workflow

    def _quote_price(self, request: QuoteRequest) -> Money:
        price = self.prices.get(request.service_ref) if request.service_ref is not None else None
        if price is None:
            return request.money
        if not request.money.same_denomination(price):
            raise AmpError(UNSUPPORTED_ASSET, f"{request.service_ref} is sold for {price.asset} on {price.network}",
                           path="params.money")
        if request.money.amount_minor != price.amount_minor:
            raise AmpError(BAD_REQUEST, f"{request.service_ref} costs {price.amount_minor} {price.asset} "
                                        "(minor units)", path="params.money.amount_minor")
        return price

    def _admit(self, params: Any, ctx: Any) -> str:
        """What every workflow invoke does before planning: its sender, the
        demo credit of a new payer, the refund policy of a spent payment."""
        sender = ctx.sender
        if sender is None:  # only the daemon calls this, always with the envelope's sender
            raise AmpError(5001, "payment workflow called without a sender")
        if self.demo_credit is not None and isinstance(params, Mapping) and params.get("op") == "quote_request":
            payer = ctx.delegator or sender
            credit = self.demo_credit
            reference = f"demo:{payer}:{credit.asset}"
            # A payer already credited (by this process) costs no write
            # transaction: the deposit would move nothing (its entry exists)
            # and roll back. Memory only skips that no-op; a miss asks the store.
            if reference not in self._credited:
                self.state.deposit(self.ledger.deposit(reference, payer, credit))
                if len(self._credited) >= _CREDITED_MAX:
                    self._credited.clear()
                self._credited.add(reference)
        if (isinstance(params, Mapping) and params.get("op") == "refund" and isinstance(params.get("payment_id"), bytes)
                and self.state.consumed(params["payment_id"]) is not None):
            # Payee policy: the call it bought has run; its money is not given back.
            raise NotExecuted(INVALID_TRANSITION, "this payment has bought a call that ran: not refundable",
                              path="params.payment_id")
        return str(sender)

    def workflow(self, params: Any, ctx: Any) -> Any:
        """One CAP_INVOKE of ``org.agentries.payment.workflow:1.0.0``, its
        step committed in a transaction of its own before it returns."""
        return self._run_now(params, ctx, self._admit(params, ctx))

    def _run_now(self, params: Any, ctx: Any, sender: str) -> Any:
        decision, _ = handle(self.payee, params, sender=sender, now_ms=ctx.now_ms(), state=self.state,
                             acting_for=ctx.delegator, envelope_session=_session_id(ctx.session))
        return _answer(decision)

    def workflow_in_ticks(self, params: Any, ctx: Any) -> Any:
        """:meth:`workflow` as the daemon serves it. While the daemon's
        durable batch runs the jobs its commit released (a turn of its loop),
        the turn's first workflow step runs on the spot, as :meth:`workflow`;
        the later ones that write are staged and commit together when the batch
        is done (:func:`after_apply`; :meth:`PaymentStore.apply_many`: one
        commit, not one each), and each is answered then (a :class:`Later`),
        from what committed. A step whose plan lost to another of the batch
        (or to another worker) is planned again on its own, as :func:`handle`
        does. So one payer at a time pays nothing more, and many in flight
        share commits. Rejections, replays and reads answer at once; with
        the store in memory (no batch) every step runs as :meth:`workflow`."""
        sender = self._admit(params, ctx)
        if not self._turn_busy:
            self._turn_busy = applying(self.state.store)  # the rest of this turn is staged (reset by the hook)
            return self._run_now(params, ctx, sender)
        try:
            request = parse_request(params)
        except AmpError as exc:
            raise NotExecuted(exc.code, exc.message, path=exc.path) from None
        now, session = ctx.now_ms(), _session_id(ctx.session)
        plan = first_plan(self.payee, request, sender=sender, now_ms=now, view=self.state, acting_for=ctx.delegator,
                          envelope_session=session)
        if not isinstance(plan, Plan):
            return _answer(plan)
        if not plan.writes:
            return _answer(plan.decision)
        later = Later()
        self._batch.append(_Staged(plan, later, request, sender, now, ctx.delegator, session))
        return later

    def _commit_batch(self) -> None:
        """The daemon's batch is done (:func:`after_apply`): commit the turn's
        staged steps, then answer each. Never raises (it runs in the daemon's
        commit loop)."""
        self._turn_busy = False
        batch, self._batch = self._batch, []
        if not batch:
            return
        try:
            try:
                committed = (self.state.apply_many([s.plan for s in batch]) if len(batch) > 1
                             else [self.state.apply(batch[0].plan)])
            except Exception as exc:  # the store failed: nothing of the batch was written
                failed = store_failed(exc)
                for staged in batch:
                    _settle(staged.later, failed)
                return
            for staged, ok in zip(batch, committed):
                decision = staged.plan.decision
                if not ok:  # another step moved the payment first: plan again, from what is stored now
                    decision, _ = handle(self.payee, None, request=staged.request, sender=staged.sender,
                                         now_ms=staged.now_ms, state=self.state, acting_for=staged.acting_for,
                                         envelope_session=staged.session, attempts=MAX_ATTEMPTS - 1)
                _settle(staged.later, decision)
        except Exception as exc:  # a bug here: every step still gets its one answer
            log.exception("payment batch failed: %s", exc)
            for staged in batch:
                staged.later.settle(error=AmpError(5001, "payment step failed"))

    # ---------------------------------------------------------- paid capabilities

    def paying(self, capability_id: str, run: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """``run`` (a plain function) behind the payment check: the payment is spent, then ``run`` runs."""
        price = self.prices[capability_id]

        def paid(params: Any, ctx: Any) -> Any:
            return run(self.spend(capability_id, price, params, ctx), ctx)

        return paid

    def spend(self, capability_id: str, price: Money, params: Any, ctx: Any) -> dict[str, Any]:
        """Check ``params[$payment]`` pays for one call and spend it; the params without it."""
        if not isinstance(params, Mapping) or PAYMENT_PARAM not in params:
            raise NotExecuted(UNAUTHORIZED, f"payment required: quote {capability_id} (service_ref) from "
                                            f"{self.identity.did}, then pass its payment_id as {PAYMENT_PARAM}",
                              path=f"params.{PAYMENT_PARAM}")
        payment_id = _payment_id(params[PAYMENT_PARAM])
        self.check_payment(payment_id, capability_id, price, ctx)
        if not self.state.consume(payment_id, capability_id, ctx.sender or "", ctx.now_ms(),
                                  getattr(ctx, "invoke_id", b"")):
            raise NotExecuted(UNAUTHORIZED, "this payment has already bought a call", path=f"params.{PAYMENT_PARAM}")
        return {k: v for k, v in params.items() if k != PAYMENT_PARAM}

    def check_payment(self, payment_id: bytes, capability_id: str, price: Money, ctx: Any) -> None:
        record = self.state.payment(payment_id)
        where = f"params.{PAYMENT_PARAM}"
        # One answer for every way a payment does not pay for this call: a
        # caller learns nothing about other payers' payments.
        refused = NotExecuted(UNAUTHORIZED, "payment required: no captured payment of yours for this capability",
                              path=where)
        if record is None or record.payer not in (ctx.sender, ctx.delegator):
            raise refused
        if record.service_ref != capability_id or record.state not in _PAID_STATES:
            raise refused
        if not record.money.same_denomination(price) or record.captured < price.amount_minor:
            raise refused


class _Staged(NamedTuple):
    """A workflow step planned this turn, waiting for the turn's commit."""

    plan: Plan
    later: Later
    request: PaymentRequest
    sender: str
    now_ms: int
    acting_for: str | None
    session: bytes | None


def _answer(decision: Decision) -> Any:
    """A decision as the handler's outcome (A.21): a result, or the error to raise."""
    if isinstance(decision, Answered):
        return decision.result
    if isinstance(decision, Rejected):
        raise NotExecuted(decision.code, decision.message, path=decision.path)
    raise AmpError(decision.code, decision.message)


def _settle(later: Later, decision: Decision) -> None:
    try:
        later.settle(result=_answer(decision))
    except AmpError as exc:  # NotExecuted included: the executor tells ERROR from CAP_RESULT error
        later.settle(error=exc)


def _paid_echo(params: Any, ctx: Any) -> Any:
    return {"message": params["message"], "paid": True}


def _inline(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``fn`` marked for the daemon's inline path (net/daemon/jobs.py)."""

    def handler(params: Any, ctx: Any) -> Any:
        return fn(params, ctx)

    handler.inline = True  # type: ignore[attr-defined]
    return handler
