"""A.7 / A.18: a delegated payment on the CAP path. The RFC 005 chain is
checked first by the real verifier (step 3 of RFC 004 §7.2); a bad chain
is 3004 and the payment engine never runs, a good one hands the engine the
principal the delegate acts for, and the payment's semantics do not change.
test_served.py runs the same over a daemon (the executor's delegated step)."""

from __future__ import annotations

from typing import Any

from ampcap.deleg.chain import ChainVerifier, VerifierConfig, evidence_body
from ampcap.deleg.credential import issue
from ampcap.deleg.revocation import MemoryRevocations, RevocationChecker
from ampcap.deleg.scope import Target
from ampcap.pay.codes import Answered
from ampcap.pay.lifecycle import State
from ampcap.pay.workflow import WORKFLOW_ID, WORKFLOW_NAME
from ampcap.store.database import StateStore
from ampcap.wire.cbor import dumps
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.registry import MessageType, error_body

from .conftest import T0, World, money, pid

OWNER = Identity.from_seed(b"\x31" * 32)  # the payer, who delegates
ASSISTANT = Identity.from_seed(b"\x32" * 32)
HOUR = 3_600_000


def _verifier(payee_did: str) -> ChainVerifier:
    return ChainVerifier(DidKeyResolver(), RevocationChecker(store=MemoryRevocations()),
                         VerifierConfig(verifier_did=payee_did))


def _invoke(world: World, verifier: ChainVerifier, evidence: Any, params: dict[str, Any]) -> Any:
    """The executor's order: delegation (3004) before the payment runs."""
    decision = verifier.evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence, caller=ASSISTANT.did,
                                 target=Target(capability=WORKFLOW_NAME, capability_id=WORKFLOW_ID), now_ms=T0)
    if not decision.allowed:
        assert decision.error is not None
        return decision.error
    return world.send(params, sender=ASSISTANT.did, acting_for=OWNER.did)


def _credential(**over: Any) -> Any:
    fields: dict[str, Any] = dict(delegation_id="pay-1", delegate=ASSISTANT.did, issued_at=T0 - 1000,
                                  expires_at=T0 + HOUR, capabilities=[WORKFLOW_NAME])
    fields.update(over)
    return evidence_body([issue(OWNER, **fields)])


def test_a7_a_valid_chain_lets_the_delegate_pay_for_its_principal(store: StateStore) -> None:
    world = World(store, funds=0)
    world.fund(OWNER.did, 1_000)
    verifier = _verifier(world.payee_did)
    quote = _invoke(world, verifier, _credential(), {"pay_v": 1, "op": "quote_request", "payment_id": pid(1),
                                                     "payee": world.payee_did, "money": money(300)})
    assert isinstance(quote, Answered) and quote.result["payer"] == OWNER.did
    auth = _invoke(world, verifier, _credential(), {
        "pay_v": 1, "op": "authorize", "payment_id": pid(1), "quote_id": quote.result["quote_id"],
        "payer": OWNER.did, "payee": world.payee_did, "money": money(300)})
    assert auth.result["status"] == "authorized"
    assert world.state.payment(pid(1)).state is State.AUTHORIZED
    assert world.balances()[OWNER.did] == 700


def test_a18_invalid_delegation_evidence_is_3004_before_the_payment(store: StateStore) -> None:
    world = World(store, funds=0)
    verifier = _verifier(world.payee_did)
    params = {"pay_v": 1, "op": "quote_request", "payment_id": pid(1), "payee": world.payee_did,
              "money": money(300)}
    for evidence in (_credential(expires_at=T0 - 1), _credential(capabilities=["org.example.other"]),
                     {"chain": "not a chain"}, _credential(not_before=T0 + HOUR // 2)):
        error = _invoke(world, verifier, evidence, params)
        assert error.code == 3004, error
    assert world.state.payment(pid(1)) is None  # nothing executed
    assert bytes.fromhex("190bbc") in dumps(error_body(3004, "x"))
