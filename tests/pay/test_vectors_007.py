"""RFC 007 Appendix A, the vectors about the CAP path and the core rules,
against the payee's engine over a real store and the local ledger.

Where a vector's subject is the CAP envelope layer (the descriptor check,
delegation evidence, the ERROR vs CAP_RESULT bytes) this checks the part
phase A owns: the decision the engine or the descriptor trust profile hands
the executor. The end-to-end runs over a daemon are test_served.py and test_interop_pay.py.
The A.17a/A.17b descriptor vectors live in tests/caps/test_descriptor_trust.py.
"""

from __future__ import annotations

from ampcap.pay.bodies import is_payment_control, parse_request
from ampcap.pay.codes import Answered, ExecutionFailed, Rejected
from ampcap.pay.lifecycle import State
from ampcap.pay.payee import handle
from ampcap.pay.settlement import SettlementUnavailable, parse_proof
from ampcap.wire.cbor import dumps

from .conftest import NET, PAYER, T0, World, money, pid


def test_a1_quote_to_capture_positive(world: World) -> None:
    quote = world.quote(1)
    assert isinstance(quote, Answered) and quote.result["op"] == "quote"
    assert world.state.payment(pid(1)).state is State.QUOTED
    auth = world.authorize(1, quote.result)
    assert auth.result["status"] == "authorized"
    assert world.state.payment(pid(1)).state is State.AUTHORIZED
    cap = world.capture(1, quote.result)
    assert cap.result["op"] == "capture_result" and cap.result["status"] in ("captured", "settled")
    assert world.state.payment(pid(1)).state is State.SETTLED
    world.ledger.verify(parse_proof(cap.result["settlement"]), payment_id=pid(1),
                        money=world.state.payment(pid(1)).money)


def test_a2_authorize_after_quote_expiry_is_4102(world: World) -> None:
    quote = world.quote(1, now=T0).result
    late = quote["quote_expires_at"] + 1
    assert world.authorize(1, quote, now=late) == Rejected(4102, "the quote expired")
    # §7: the quote went quoted -> failed; a retry still says why.
    assert world.state.payment(pid(1)).state is State.FAILED
    assert world.authorize(1, quote, now=late + 5).code == 4102
    assert world.balances()[PAYER] == 10_000


def test_a3_capture_before_authorization_is_4103(world: World) -> None:
    quote = world.quote(1).result
    decision = world.capture(1, quote)
    assert isinstance(decision, Rejected) and decision.code == 4103
    assert world.state.payment(pid(1)).state is State.QUOTED


def test_a4_duplicate_authorize_is_idempotent(world: World) -> None:
    quote = world.quote(1).result
    first = world.authorize(1, quote)
    version = world.state.payment(pid(1)).version
    again = world.authorize(1, quote, now=T0 + 10)
    assert again.replayed and dumps(again.result) == dumps(first.result)
    assert world.state.payment(pid(1)).version == version  # no second transition
    assert world.balances()[PAYER] == 9_500  # held once


def test_a6_session_scoped_payment_keeps_its_session(world: World) -> None:
    session = {"session_id": b"s" * 16, "session_scope": True}
    quote = world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
                        "money": money(500), "session": session}, envelope_session=b"s" * 16)
    assert quote.result["session"] == session
    assert world.state.payment(pid(1)).session_id == b"s" * 16


def test_a7_a18_delegated_payment_semantics_are_unchanged(world: World) -> None:
    # The CAP layer verifies the chain (3004 when it fails: A.18, test_served.py runs
    # it over a daemon); the engine then sees the delegate as sender, acting
    # for the payer, and the payment behaves as if the payer sent it.
    delegate = "did:example:assistant"
    quote = world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
                        "money": money(500)}, sender=delegate, acting_for=PAYER).result
    assert quote["payer"] == PAYER
    auth = world.send({"pay_v": 1, "op": "authorize", "payment_id": pid(1), "quote_id": quote["quote_id"],
                       "payer": PAYER, "payee": world.payee_did, "money": quote["money"]},
                      sender=delegate, acting_for=PAYER)
    assert auth.result["status"] == "authorized"
    # Without the verified chain the same delegate is not the payer.
    assert world.op(1, "cancel", sender=delegate).code == 3001


def test_a8_unsupported_pay_v_is_1004(world: World) -> None:
    decision = world.send({"pay_v": 2, "op": "status_query", "payment_id": pid(1)})
    assert isinstance(decision, Rejected) and decision.code == 1004


def test_a9_dispatch_guard() -> None:
    # A REQUEST body with a business op and no pay_v is not payment-control.
    body = {"op": "capture", "payment_id": pid(1), "money": money(5)}
    assert not is_payment_control(body)
    assert is_payment_control({**body, "pay_v": 1})


def test_a10_cancel_before_capture(world: World) -> None:
    quote = world.quote(1).result
    world.authorize(1, quote)
    result = world.op(1, "cancel", reason="changed my mind")
    assert result.result["status"] == "canceled"
    assert world.state.payment(pid(1)).state is State.CANCELED
    assert world.balances()[PAYER] == 10_000  # the hold came back
    assert world.capture(1, quote).code == 4103


def test_a11_refund_after_settlement(world: World) -> None:
    quote = world.quote(1).result
    world.authorize(1, quote)
    world.capture(1, quote)
    decision = handle(world.payee, {"pay_v": 1, "op": "refund", "payment_id": pid(1)}, sender=PAYER,
                      now_ms=T0, state=world.state)
    result, plan = decision
    assert plan is not None and plan.transitions == (State.REFUND_PENDING, State.REFUNDED)
    assert result.result["status"] == "refunded" and "settlement" in result.result
    assert world.balances()[PAYER] == 10_000 and world.balances()[world.payee_did] == 0


def test_a12_status_of_an_unknown_payment_is_4106(world: World) -> None:
    assert world.op(99, "status_query").code == 4106


def test_a13_duplicate_capture_returns_the_terminal_result(world: World) -> None:
    quote = world.quote(1).result
    world.authorize(1, quote)
    first = world.capture(1, quote)
    again = world.capture(1, quote, now=T0 + 1000)
    assert again.replayed and dumps(again.result) == dumps(first.result)
    assert world.balances()[world.payee_did] == 500


def test_a14_authorize_body_in_cap_params_gives_authorize_result(world: World) -> None:
    quote = world.quote(1).result
    result = world.authorize(1, quote).result
    assert result["op"] == "authorize_result" and result["pay_v"] == 1 and result["payment_id"] == pid(1)


def test_a15_lowercase_asset_is_4001(world: World) -> None:
    decision = world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
                           "money": {"amount_minor": 5, "asset": "usd", "network": NET}})
    assert isinstance(decision, Rejected) and decision.code == 4001
    assert world.state.payment(pid(1)) is None


def test_a16_cap_carriage_has_no_direction_checks() -> None:
    # Request ops are read from params whatever the envelope type; §5.8's
    # REQUEST/RESPONSE matrix is never consulted on the CAP path.
    assert parse_request({"pay_v": 1, "op": "status_query", "payment_id": pid(1)}).op == "status_query"


def test_a20_session_mismatch_is_4001(world: World) -> None:
    decision = world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
                           "money": money(5), "session": {"session_id": b"a" * 16, "session_scope": True}},
                          envelope_session=b"b" * 16)
    assert isinstance(decision, Rejected) and decision.code == 4001


class _DownAdapter:
    """The local ledger, but its capture cannot complete now."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def capture(self, *args: object) -> object:
        raise SettlementUnavailable("ledger offline")


def test_a21_rejection_before_execution_vs_failure_during_it(world: World) -> None:
    # Case 1: validation-time rejection: an AMP ERROR decision, nothing stored.
    quote = world.quote(1).result
    world.authorize(1, quote)
    before = world.state.payment(pid(1))
    rejected = world.send({"pay_v": 1, "op": "capture", "payment_id": pid(1)})  # no quote_id, no money
    assert isinstance(rejected, Rejected) and rejected.code == 1001
    # Case 2: accepted, then the adapter fails: CAP_RESULT(status="error").
    world.payee.adapter = _DownAdapter(world.ledger)  # type: ignore[assignment]
    failed = world.capture(1, quote)
    assert isinstance(failed, ExecutionFailed) and failed.code == 5002
    assert world.state.payment(pid(1)) == before  # nothing committed: a retry runs again
    world.payee.adapter = world.ledger
    assert world.capture(1, quote).result["status"] == "settled"


def test_a6_the_envelope_session_alone_scopes_the_payment(world: World) -> None:
    # §5.10: the envelope's body.session is the source of truth; params may omit it.
    world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
                "money": money(500)}, envelope_session=b"e" * 16)
    assert world.state.payment(pid(1)).session_id == b"e" * 16
