"""RFC 005 Appendix A.1-A.20 (tests/vectors/rfc005/appendix_a.json)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deleg_helpers import IDS, NOW, VECTORS, did, evidence, link, sign_payload, verifier  # noqa: E402

from ampcap.deleg.bodies import parse_revoke_body  # noqa: E402
from ampcap.deleg.credential import credential_envelope  # noqa: E402
from ampcap.deleg.revocation import QueryResult, StatusCache  # noqa: E402
from ampcap.deleg.scope import Target  # noqa: E402
from ampcap.deleg.service import DelegationService, MemoryState  # noqa: E402
from ampcap.errors import AmpError  # noqa: E402
from ampcap.wire.cbor import dumps  # noqa: E402
from ampcap.wire.identity import DidKeyResolver  # noqa: E402
from ampcap.wire.registry import MessageType, error_body  # noqa: E402

CASES = {v["id"]: v for v in VECTORS["vectors"]}


def test_every_appendix_vector_is_here() -> None:
    assert sorted(CASES, key=lambda k: int(k[2:])) == [f"A.{i}" for i in range(1, 21)]


def _target(case: dict[str, Any]) -> Target:
    t = case["target"]
    return Target(capability=t["capability"], capability_id=t.get("capability_id"),
                  action=t.get("action", "invoke"), resource=t.get("resource"))


def _revocation(spec: dict[str, Any], default_id: str = "delegation:0") -> bytes:
    payload = {"rev_v": 1, "delegation_id": spec.get("delegation_id", default_id), "delegator": did(spec["by"]),
               "revoked_at": NOW + spec["revoked_at"]}
    return sign_payload(IDS[spec["by"]], payload)


def _service(state: MemoryState | None = None) -> DelegationService:
    return DelegationService(state or MemoryState(), DidKeyResolver(), own_did=did("E"))


EVALUATE = [k for k, v in CASES.items() if v["kind"] == "evaluate"]


@pytest.mark.parametrize("vid", EVALUATE)
def test_chain_evaluation(vid: str) -> None:
    case = CASES[vid]
    v = verifier(verifier_did=case.get("verifier_did"), publisher=case.get("publisher"))
    decision = v.evaluate(typ=case.get("typ", int(MessageType.CAP_INVOKE)), evidence=evidence(case["links"]),
                          caller=did(case["caller"]), target=_target(case), now_ms=NOW)
    if case["expect"] == "allow":
        assert decision.allowed, decision.error
        assert decision.audit.decision == "allow" and decision.audit.reason_code == 0
        assert decision.delegator == did(case["links"][0]["from"])
    else:
        assert not decision.allowed
        assert decision.error is not None and decision.error.code == case["expect"], decision.error
        assert decision.audit.decision == "deny" and decision.audit.reason_code == case["expect"]
    assert decision.audit.requester_did == did(case["caller"])
    assert decision.audit.evaluated_at == NOW


def test_a1_grant_is_accepted_and_stored() -> None:
    case = CASES["A.1"]
    state = MemoryState()
    raw = link(case["links"][0])
    typ, body = _service(state).handle(int(MessageType.DELEG_GRANT), {"credential": credential_envelope(raw)},
                                       did("A"), NOW)
    assert typ == MessageType.PROC_OK
    [stored] = state.credentials_with_id("delegation:0", 8)
    assert stored.key == (did("A"), "delegation:0") and stored.delegate == did("B")


def test_a7_revocation_then_use_is_denied() -> None:
    case = CASES["A.7"]
    state = MemoryState()
    service = _service(state)
    rev = _revocation(case["revocation"])
    typ, _ = service.handle(int(MessageType.DELEG_REVOKE), {"delegation_id": "delegation:0", "revocation": rev},
                            did("A"), NOW)
    assert typ == MessageType.PROC_OK
    v = verifier(store=state)
    decision = v.evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence(case["links"]), caller=did("B"),
                          target=_target(case), now_ms=NOW)
    assert decision.error is not None and decision.error.code == 3004
    # The same chain, before the revocation took effect, was fine.
    assert verifier().evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence(case["links"]),
                               caller=did("B"), target=_target(case), now_ms=NOW).allowed


def test_a7_revocation_by_someone_else_is_refused() -> None:
    forged = _revocation({"by": "B", "revoked_at": -1000})
    # Signed by B, claiming to be A's revocation: the payload says B, so it
    # does not touch A's credential; one claiming A but signed by B fails.
    payload = {"rev_v": 1, "delegation_id": "delegation:0", "delegator": did("A"), "revoked_at": NOW}
    with pytest.raises(AmpError) as info:
        _service().handle(int(MessageType.DELEG_REVOKE),
                          {"delegation_id": "delegation:0", "revocation": sign_payload(IDS["B"], payload)},
                          did("B"), NOW)
    assert info.value.code == 3004
    assert forged  # well formed, B's own


def test_a8_query_unknown_id() -> None:
    typ, body = _service().handle(int(MessageType.DELEG_QUERY), CASES["A.8"]["query"], did("C"), NOW)
    assert typ == MessageType.RESPONSE
    assert body["status"] == "unknown" and set(body) == {"delegator", "delegation_id", "status", "updated_at",
                                                          "max_age_s"}


def test_a13_revoke_id_mismatch() -> None:
    case = CASES["A.13"]
    body = {"delegation_id": case["body_delegation_id"], "revocation": _revocation(case["revocation"])}
    with pytest.raises(AmpError) as info:
        parse_revoke_body(body)
    assert info.value.code == 4001


def test_a17_cache_uses_publisher_freshness() -> None:
    case = CASES["A.17"]
    cache = StatusCache(default_max_age_s=3600)
    s = case["status"]
    cache.put(QueryResult(delegator=did("A"), delegation_id="delegation:0", status=s["status"],
                          updated_at=NOW + s["updated_at"], max_age_s=s["max_age_s"]))
    for at in case["expect"]["fresh_at"]:
        assert cache.get((did("A"), "delegation:0"), NOW + at) is not None
    for at in case["expect"]["stale_at"]:
        assert cache.get((did("A"), "delegation:0"), NOW + at) is None
    assert cache.wanted() == [(did("A"), "delegation:0")]


def test_a17_fresh_status_lets_a_strict_verifier_decide() -> None:
    cache = StatusCache()
    links = CASES["A.10"]["links"]
    v = verifier(publisher="E", cache=cache)
    target = Target(capability="org.agentries.code-review")
    first = v.evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence(links), caller=did("B"), target=target,
                       now_ms=NOW)
    assert first.error is not None and first.error.code == 5002
    cache.put(QueryResult(delegator=did("A"), delegation_id="delegation:0", status="active", updated_at=NOW,
                          max_age_s=30))
    assert v.evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence(links), caller=did("B"), target=target,
                      now_ms=NOW + 1000).allowed
    cache.put(QueryResult(delegator=did("A"), delegation_id="delegation:0", status="revoked", updated_at=NOW,
                          revoked_at=NOW, max_age_s=30))
    denied = v.evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence(links), caller=did("B"), target=target,
                        now_ms=NOW + 1000)
    assert denied.error is not None and denied.error.code == 3004


def test_a19_ambiguous_query_without_delegator() -> None:
    case = CASES["A.19"]
    state = MemoryState()
    service = _service(state)
    for issuer in case["issuers"]:
        raw = link({"from": issuer, "to": "B", "scope": {"actions": ["invoke"]}, "id": case["delegation_id"]})
        service.handle(int(MessageType.DELEG_GRANT), {"credential": credential_envelope(raw)}, did(issuer), NOW)
    errors = []
    for _ in range(2):
        with pytest.raises(AmpError) as info:
            service.handle(int(MessageType.DELEG_QUERY), {"delegation_id": case["delegation_id"]}, did("C"), NOW)
        errors.append(info.value.to_body())
    assert info.value.code == case["expect"]
    assert errors[0] == errors[1] and did("A") not in str(errors[0]) and did("E") not in str(errors[0])
    # Naming the delegator resolves it.
    _, body = service.handle(int(MessageType.DELEG_QUERY),
                             {"delegation_id": case["delegation_id"], "delegator": did("A")}, did("C"), NOW)
    assert body["status"] == "active" and body["delegator"] == did("A")


def test_a20_error_code_bytes() -> None:
    for code, hexed in CASES["A.20"]["expect"].items():
        assert dumps(int(code)).hex() == hexed
        assert bytes.fromhex(hexed) in dumps(error_body(int(code), "x"))
