"""The workflow capability as RFC 004 sees it: its manifest table loads,
its descriptor is signed by the daemon's identity, and its schemas pass
every payment body through step 7 (params holding CBOR byte strings), so
that the RFC 007 codes come from the payment core, not a 4004."""

from __future__ import annotations

from typing import Any

import pytest

from ampcap.caps.manifest import manifest_from_data
from ampcap.caps.params import ParamsValidator
from ampcap.files.manifest import sign_descriptors
from ampcap.pay.workflow import capability_table
from ampcap.wire.identity import Identity

from .conftest import T0, World, money, pid

NOOP = {"python": "ampcap.caps.demo:noop"}


@pytest.fixture
def served() -> Any:
    data = {"descriptor_signer": "identity", "capability": [capability_table(NOOP)]}
    return sign_descriptors(manifest_from_data(data), Identity.from_seed(b"\x09" * 32))


def test_the_descriptor_is_signed_and_idempotent(served: Any) -> None:
    spec = served.find("org.agentries.payment.workflow:1.0.0")[0]
    assert spec.descriptor.descriptor_sig is not None and spec.idempotent


def test_every_body_passes_the_schemas_including_faulty_ones(served: Any, world: World) -> None:
    spec = served.find("org.agentries.payment.workflow")[0]
    validator = ParamsValidator(served.schema_store())
    quote = world.quote(1).result
    bodies = [
        {"pay_v": 1, "op": "quote_request", "payment_id": pid(2), "payee": world.payee_did, "money": money(1)},
        {"pay_v": 1, "op": "authorize", "payment_id": pid(1), "quote_id": quote["quote_id"],
         "payer": quote["payer"], "payee": quote["payee"], "money": quote["money"]},
        {"pay_v": 2, "op": "status_query", "payment_id": pid(1)},  # 1004 from the core
        {"pay_v": 1, "op": "quote_request", "payment_id": pid(3), "payee": "x",
         "money": {"amount_minor": 1, "asset": "usd", "network": "n"}},  # 4001 from the core
        {"op": "capture"},  # 1001 from the core
    ]
    for params in bodies:
        validator.validate_params(spec.descriptor, params)  # never 4004
    assert validator.validate_result(spec.descriptor, quote) == []
    assert world.send(bodies[2]).code == 1004 and world.send(bodies[3], now=T0).code == 4001
