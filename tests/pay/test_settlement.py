"""§6 settlement proofs: parse (1001), binding and signature (3001), and a
ledger that does not trust an adapter fails closed."""

from __future__ import annotations

from typing import Any

import pytest

from ampcap.errors import AmpError
from ampcap.pay.ledger import LocalLedger
from ampcap.pay.money import Money
from ampcap.pay.settlement import ProofPayload, parse_proof, proof_signing_input, sign_proof
from ampcap.wire.cbor import dumps, loads
from ampcap.wire.identity import Identity

from .conftest import LEDGER_SEED, NET

PID = b"p" * 16
M = Money(250, "USD", NET)


@pytest.fixture
def ledger() -> LocalLedger:
    return LocalLedger(Identity.from_seed(LEDGER_SEED))


def proof_wire(ledger: LocalLedger, **payload_over: Any) -> dict[str, Any]:
    payload = ProofPayload(network=NET, payment_id=PID, money=M, reference="r", finalized_at=5)
    wire = sign_proof(payload, ledger.adapter_id, ledger.key.sign).to_wire()
    wire["payload"].update(payload_over)
    return loads(dumps(wire))  # as it arrives: decoded CBOR


def test_a_ledger_proof_verifies_over_what_it_states(ledger: LocalLedger) -> None:
    proof = parse_proof(proof_wire(ledger))
    ledger.verify(proof, payment_id=PID, money=M)
    # The signed input is CBOR ["APP-proof-v1", bstr(deterministic payload)].
    assert loads(proof_signing_input(proof.payload)) == ["APP-proof-v1", dumps(proof.payload.to_wire())]


@pytest.mark.parametrize("mangle", [
    lambda w: "not a map",
    lambda w: {**w, "payload": None},
    lambda w: {**w, "sig": b"short"},
    lambda w: {**w, "payload": {**w["payload"], "proof_v": 2}},
    lambda w: {**w, "payload": {**w["payload"], "payment_id": b"x"}},
    lambda w: {**w, "payload": {**w["payload"], "money": {"amount_minor": 1.5, "asset": "USD", "network": NET}}},
    lambda w: {**w, "payload": {**w["payload"], "money": {"amount_minor": 1, "asset": "usd", "network": NET}}},
    lambda w: {**w, "adapter_id": 3},
])
def test_malformed_proofs_are_1001(ledger: LocalLedger, mangle: Any) -> None:
    # A.5a
    with pytest.raises(AmpError) as err:
        parse_proof(mangle(proof_wire(ledger)))
    assert err.value.code == 1001


def test_binding_and_signature_failures_are_3001(ledger: LocalLedger) -> None:
    # A.5b: parseable, but bound to another payment, other money, or re-signed badly.
    good = parse_proof(proof_wire(ledger))
    cases = [
        (good, b"q" * 16, M),
        (good, PID, Money(251, "USD", NET)),
        (good, PID, Money(250, "USDC", NET)),
        (parse_proof(proof_wire(ledger, reference="edited after signing")), PID, M),
    ]
    for proof, payment_id, money in cases:
        with pytest.raises(AmpError) as err:
            ledger.verify(proof, payment_id=payment_id, money=money)
        assert err.value.code == 3001


def test_an_untrusted_adapter_fails_closed(ledger: LocalLedger) -> None:
    other = LocalLedger(Identity.from_seed(b"\x07" * 32))
    foreign = parse_proof(proof_wire(other))
    with pytest.raises(AmpError) as err:
        ledger.verify(foreign, payment_id=PID, money=M)
    assert err.value.code == 3001 and err.value.path == "settlement.adapter_id"
    trusting = LocalLedger(ledger.key, trusted=[other.adapter_id])
    trusting.verify(foreign, payment_id=PID, money=M)
