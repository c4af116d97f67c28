"""Hostile delegation input: every case gets its code, never a crash, and a
bounded cost (ruling: the verifier decides, it does not raise)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import cbor2
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deleg_helpers import IDS, NOW, did, evidence, link, sign_payload, verifier  # noqa: E402

from ampcap.deleg.cose import COSE_SIGN1_TAG, default_kid, protected_header  # noqa: E402
from ampcap.deleg.credential import credential_envelope, revoke  # noqa: E402
from ampcap.deleg.revocation import MemoryRevocations  # noqa: E402
from ampcap.deleg.scope import Target  # noqa: E402
from ampcap.wire.cbor import CBORTag, dumps  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

CAP = "org.agentries.code-review"
INVOKE = int(MessageType.CAP_INVOKE)
TARGET = Target(capability=CAP, capability_id=f"{CAP}:1.0.0")


def chain3(**last: Any) -> list[dict[str, Any]]:
    return [
        {"from": "A", "to": "B", "scope": {"capabilities": [CAP], "actions": ["invoke", "read"]},
         "allow_subdelegation": True},
        {"from": "B", "to": "C", "scope": {"capabilities": [CAP]}, "allow_subdelegation": True},
        {"from": "C", "to": "D", "scope": {"capabilities": [CAP], "actions": ["invoke"]}, **last},
    ]


def code(ev: Any, *, caller: str = "D", v: Any = None, now: int = NOW, target: Target | None = TARGET) -> int:
    v = v or verifier()
    started = time.perf_counter()
    decision = v.evaluate(typ=INVOKE, evidence=ev, caller=did(caller), target=target, now_ms=now)
    assert time.perf_counter() - started < 0.5, "a chain must be decided quickly"
    decision.audit.to_json()  # the audit record always builds
    return 0 if decision.error is None else decision.error.code


def test_the_valid_chain_passes() -> None:
    assert code(evidence(chain3())) == 0


def test_forged_links() -> None:
    # Signed by C in A's name: the kid names C, the payload A.
    assert code(evidence([{**chain3()[0], "signer": "C"}, *chain3()[1:]])) == 3004
    # kid names A but the signature is C's.
    links = chain3()
    payload = {"cred_v": 1, "delegation_id": "x", "delegator": did("A"), "delegate": did("B"),
               "scope": links[0]["scope"], "validity": {"issued_at": NOW - 1, "expires_at": NOW + 60_000},
               "allow_subdelegation": True}
    protected = protected_header(default_kid(did("A")))
    from ampcap.deleg.cose import _sig_structure
    bad = dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, dumps(payload),
                                         IDS["C"].sign(_sig_structure(protected, dumps(payload)))]))
    ev = evidence(chain3())
    ev["chain"][0] = credential_envelope(bad)
    assert code(ev) == 3004
    # A signature bit flipped.
    raw = bytearray(ev["chain"][1]["credential"])
    raw[-1] ^= 1
    ev = evidence(chain3())
    ev["chain"][1] = credential_envelope(bytes(raw))
    assert code(ev) == 3004


def test_swapped_delegate_and_reordered_links() -> None:
    links = chain3()
    assert code(evidence([links[0], {**links[1], "to": "E"}, links[2]])) == 3004  # B→E, then C→D: broken
    ev = evidence(links)
    ev["chain"] = [ev["chain"][1], ev["chain"][0], ev["chain"][2]]
    assert code(ev) == 3004
    assert code(evidence(links), caller="C") == 3001  # a link's delegate, not the last one


def test_scope_widened_deep_in_the_chain() -> None:
    assert code(evidence(chain3(scope={"capabilities": [CAP], "actions": ["invoke", "write"]}))) == 3004
    assert code(evidence(chain3(scope={"capabilities": [CAP, "org.agentries.deploy"]}))) == 3004
    assert code(evidence(chain3(scope={"resources": ["repo:1"]}))) == 3004  # a resource the request lacks
    # Narrowing to an id, then asking for another version.
    assert code(evidence(chain3(scope={"capabilities": [f"{CAP}:2.0.0"]}))) == 3004


def test_revoked_credential_replayed_even_from_the_cache() -> None:
    store = MemoryRevocations()
    v = verifier(store=store)
    ev = evidence(chain3())
    assert code(ev, v=v) == 0  # now cached
    store.record_revocation(revoke(IDS["B"], delegation_id="delegation:1", revoked_at=NOW - 1), NOW)
    assert code(ev, v=v) == 3004
    # A revocation dated in the future takes effect then, not now.
    store2 = MemoryRevocations()
    v2 = verifier(store=store2)
    store2.record_revocation(revoke(IDS["A"], delegation_id="delegation:0", revoked_at=NOW + 1000), NOW)
    assert code(ev, v=v2) == 0
    assert code(ev, v=v2, now=NOW + 1000) == 3004


def test_validity_edges_under_skew() -> None:
    v = verifier()  # max_skew_ms 30 000
    early = evidence([{"from": "A", "to": "D", "scope": {"capabilities": [CAP]}, "issued_at": 30_000}])
    assert code(early, v=v) == 0  # issued by a clock 30 s ahead: accepted
    too_early = evidence([{"from": "A", "to": "D", "scope": {"capabilities": [CAP]}, "issued_at": 30_001}])
    assert code(too_early, v=v) == 3004
    nb = evidence([{"from": "A", "to": "D", "scope": {"capabilities": [CAP]}, "not_before": 30_001}])
    assert code(nb, v=v) == 3004
    ends = evidence([{"from": "A", "to": "D", "scope": {"capabilities": [CAP]}, "expires_at": 1}])
    assert code(ends, v=v) == 0
    assert code(ends, v=v, now=NOW + 1) == 3004  # expires_at is exclusive, with no skew, cache or not
    # Expiry is decided for cached chains too.
    ev = evidence(chain3(expires_at=5_000))
    assert code(ev, v=v) == 0
    assert code(ev, v=v, now=NOW + 5_000) == 3004
    assert code(ev, v=v, now=NOW + 4_999) == 0


def test_chain_past_the_depth_bound_costs_nothing() -> None:
    v = verifier()
    links = chain3()
    four = [*links[:2], {**links[2], "to": "E", "allow_subdelegation": True},
            {"from": "E", "to": "D", "scope": {"capabilities": [CAP]}}]
    assert code(evidence(four), v=v) == 3004
    assert v.verifications == 0
    huge = {"chain": [{"format": "cose_sign1", "credential": b"x"}] * 100_000}
    assert code(huge, v=v) == 3004 and v.verifications == 0
    # A link's own max_chain_depth (A.15) and a longer configured bound.
    deep = verifier(max_chain_depth=4)
    assert code(evidence(four), v=deep) == 0
    four[0] = {**four[0], "max_chain_depth": 2}
    assert code(evidence(four), v=deep) == 3004


def test_huge_and_deeply_nested_credentials() -> None:
    ev = evidence(chain3())
    ev["chain"][0] = credential_envelope(b"\x84" + b"\x40" * 3 + b"\x5a" + (9000).to_bytes(4, "big") + b"x" * 9000)
    assert code(ev) == 3004
    nested = b"\x81" * 20_000 + b"\x00"
    ev["chain"][0] = credential_envelope(nested)
    assert code(ev) == 3004
    # A payload nested deep inside a correctly signed COSE_Sign1.
    deep: Any = 0
    for _ in range(50):
        deep = [deep]
    payload = {"cred_v": 1, "delegation_id": "x", "delegator": did("A"), "delegate": did("D"),
               "scope": {"capabilities": [CAP], "constraints": {"k": deep}},
               "validity": {"issued_at": NOW, "expires_at": NOW + 1}}
    ev["chain"] = [credential_envelope(sign_payload(IDS["A"], payload))]
    assert code(ev) == 3004
    # Many scope entries, and an unknown constraint key (fail closed).
    wide = {**payload, "scope": {"capabilities": [f"org.x.c{i}" for i in range(500)]}}
    ev["chain"] = [credential_envelope(sign_payload(IDS["A"], wide))]
    assert code(ev) == 3004
    constrained = {**payload, "scope": {"capabilities": [CAP], "constraints": {"max_amount": 5}}}
    ev["chain"] = [credential_envelope(sign_payload(IDS["A"], constrained))]
    assert code(ev) == 3004


@pytest.mark.parametrize("alg", [-7, -35, -36, -257, 0, 1, "EdDSA", None, True])
def test_non_mti_algorithms(alg: Any) -> None:
    payload = {"cred_v": 1, "delegation_id": "x", "delegator": did("A"), "delegate": did("D"),
               "scope": {"capabilities": [CAP]}, "validity": {"issued_at": NOW, "expires_at": NOW + 1}}
    header: dict[int, Any] = {4: default_kid(did("A")).encode()}
    if alg is not None:
        header[1] = alg
    protected = cbor2.dumps(header, canonical=True)
    raw = dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, dumps(payload), b"\x00" * 64]))
    assert code({"chain": [credential_envelope(raw)]}) == 3004


def test_versions_and_shapes() -> None:
    assert code(evidence([{**chain3()[0], "to": "D", "cred_v": 2}])) == 1004
    assert code(evidence([{**chain3()[0], "to": "D", "cred_v": 0}])) == 1004
    for bad in ({}, [], None, {"chain": []}, {"chain": [b"x"]}, {"chain": [{"format": "jwt", "credential": b""}]},
                {"chain": "x"}, {"chain": [{"format": "cose_sign1", "credential": "text"}]},
                {"chain": evidence(chain3())["chain"], "target": {"capability": 5}},
                {"chain": evidence(chain3())["chain"], "proof": "x"}):
        assert code(bad) == 3004, bad
    # A target in the evidence that names another capability.
    assert code(dict(evidence(chain3()), target={"capability": "org.other.thing"})) == 3004
    assert code(dict(evidence(chain3()), target={"action": "read"})) == 3004  # the last link allows invoke only
    # Not deterministic CBOR: the same payload with its keys out of order.
    payload = {"validity": {"issued_at": NOW, "expires_at": NOW + 1}, "cred_v": 1, "delegation_id": "x",
               "delegator": did("A"), "delegate": did("D"), "scope": {"capabilities": [CAP]}}
    body = cbor2.dumps(payload)  # insertion order, not RFC 8949 order
    protected = protected_header(default_kid(did("A")))
    from ampcap.deleg.cose import _sig_structure
    raw = dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, body, IDS["A"].sign(_sig_structure(protected, body))]))
    assert code({"chain": [credential_envelope(raw)]}) == 3004
