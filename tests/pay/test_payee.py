"""The payee's engine beyond the Appendix A vectors: §5.9 conflicts, the
actor and terms checks, amounts within the authorization, business
failures that are answers (and replay as such)."""

from __future__ import annotations

from ampcap.pay.codes import Answered, Rejected
from ampcap.pay.lifecycle import State

from .conftest import NET, PAYER, T0, World, money, pid


def test_a_conflicting_replay_under_one_op_key_is_4001(world: World) -> None:
    quote = world.quote(1, 500).result
    # Same payment_id, op and sender, different amount: not the same semantic body.
    assert world.quote(1, 501).code == 4001
    world.authorize(1, quote)
    world.capture(1, quote, 200)
    conflict = world.capture(1, quote, 300)
    assert isinstance(conflict, Rejected) and conflict.code == 4001
    assert world.balances()[world.payee_did] == 200


def test_partial_capture_releases_the_rest_and_never_exceeds_the_authorization(world: World) -> None:
    quote = world.quote(1, 500).result
    world.authorize(1, quote)
    assert world.capture(1, quote, 501).code == 4001
    assert world.capture(1, quote, 0).code == 4001
    assert world.send({"pay_v": 1, "op": "capture", "payment_id": pid(1), "quote_id": quote["quote_id"],
                       "money": money(100, asset="EUR")}).code == 4001
    assert world.capture(1, quote, 120).result["status"] == "settled"
    assert world.balances() == {PAYER: 9_880, world.payee_did: 120, "hold:" + pid(1).hex(): 0,
                                "ledger:deposits": -10_000}
    assert world.state.payment(pid(1)).captured == 120


def test_insufficient_funds_is_a_recorded_failed_authorization(world: World) -> None:
    quote = world.quote(1, 20_000).result
    result = world.authorize(1, quote)
    assert isinstance(result, Answered)
    assert result.result["status"] == "failed" and result.result["reason_code"] == 4101
    assert world.state.payment(pid(1)).state is State.FAILED
    assert world.authorize(1, quote).replayed  # the same terminal answer again
    assert world.balances()[PAYER] == 10_000


def test_only_the_payer_acts_and_terms_cannot_be_tampered_with(world: World) -> None:
    quote = world.quote(1, 500).result
    assert world.authorize(1, quote, sender="did:example:mallory").code == 3001
    assert world.authorize(1, quote, payer="did:example:mallory").code == 3001
    assert world.authorize(1, quote, money=money(1)).code == 4001
    assert world.authorize(1, quote, quote_id=b"z" * 16).code == 4001
    assert world.authorize(1, quote, payee="did:example:other").code == 4001
    assert world.op(1, "status_query", sender="did:example:mallory").code == 3001
    assert world.op(1, "status_query", sender=world.payee_did).result["status"] == "quoted"


def test_quote_requests_name_this_payee_and_a_fresh_payment_id(world: World) -> None:
    assert world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": "did:example:x",
                       "money": money(5)}).code == 4001
    world.quote(1)
    assert world.quote(1, sender="did:example:someone-else").code == 4001


def test_assets_the_ledger_does_not_settle_are_4104(world: World) -> None:
    assert world.send({"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
                       "money": money(5, network="base-mainnet")}).code == 4104


def test_refunds_stay_within_the_capture_and_after_it(world: World) -> None:
    quote = world.quote(1, 500).result
    assert world.op(1, "refund").code == 4103
    world.authorize(1, quote)
    world.capture(1, quote, 300)
    assert world.op(1, "refund", money=money(301)).code == 4001
    assert world.op(1, "refund", money=money(100)).result["status"] == "refunded"
    assert world.balances()[PAYER] == 9_800
    assert world.op(1, "cancel").code == 4103


def test_a_refund_the_payee_cannot_cover_fails_terminally(world: World) -> None:
    quote = world.quote(1, 500).result
    world.authorize(1, quote)
    world.capture(1, quote)
    # The payee spent the money elsewhere (a movement outside this payment).
    from ampcap.pay.settlement import Account, Movement
    spend = Movement("spent", Account(world.payee_did, "USD", NET), Account("did:example:shop", "USD", NET), 400)
    assert world.state.deposit(spend)
    result = world.op(1, "refund").result
    assert result["status"] == "failed" and result["reason_code"] == 4101
    assert world.state.payment(pid(1)).state is State.FAILED
    assert world.op(1, "refund").result == result
    assert world.balances()[world.payee_did] == 100


def test_status_reports_an_expired_quote_as_failed_without_writing(world: World) -> None:
    quote = world.quote(1).result
    status = world.op(1, "status_query", now=quote["quote_expires_at"] + 1).result
    assert status["status"] == "failed"
    assert world.state.payment(pid(1)).state is State.QUOTED
    assert world.op(1, "status_query", now=T0).result["status"] == "quoted"
