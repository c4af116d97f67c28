"""A chain the verifier validated before is decided by a short path
(ChainVerifier._evaluate_known) instead of the step table: for every request
it must give the decision the table gives a verifier that caches nothing
(allowed or not, code, message, step, target and revocation sources)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deleg_helpers import IDS, NOW, did, evidence  # noqa: E402

from ampcap.deleg.chain import ChainVerifier, Decision, Step, VerifierConfig  # noqa: E402
from ampcap.deleg.credential import revoke  # noqa: E402
from ampcap.deleg.revocation import MemoryRevocations, RevocationChecker  # noqa: E402
from ampcap.deleg.scope import Target  # noqa: E402
from ampcap.wire.identity import DidKeyResolver, Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

CAP = "org.agentries.code-review"
INVOKE = int(MessageType.CAP_INVOKE)
TARGET = Target(capability=CAP, capability_id=f"{CAP}:1.0.0", resource="repo:1")
VERIFIER = Identity.from_seed(bytes(range(32))).did
LINKS = [
    {"from": "A", "to": "B", "scope": {"capabilities": [CAP], "actions": ["invoke", "read"]},
     "allow_subdelegation": True, "expires_at": 120_000},
    {"from": "B", "to": "C", "scope": {"capabilities": [CAP]}, "allow_subdelegation": True, "aud": [VERIFIER]},
    {"from": "C", "to": "D", "scope": {"capabilities": [CAP], "resources": ["repo:1"]}, "expires_at": 60_000},
]


def verifiers(store: MemoryRevocations) -> tuple[ChainVerifier, ChainVerifier]:
    """(one that caches validated chains, one that caches nothing), sharing ``store``."""
    def make(entries: int) -> ChainVerifier:
        return ChainVerifier(DidKeyResolver(), RevocationChecker(store=store),
                             VerifierConfig(verifier_did=VERIFIER, link_cache_entries=entries))
    return make(4096), make(0)


def seen(decision: Decision) -> tuple[Any, ...]:
    err = decision.error
    return (decision.allowed, None if err is None else (err.code, err.message), decision.step, decision.target,
            decision.sources, tuple(c.key for c in decision.chain))


CASES: list[tuple[str, dict[str, Any]]] = [
    ("allowed", {}),
    ("another caller", {"caller": "C"}),
    ("not yet valid", {"now": NOW - 60_000 - 30_001}),
    ("just inside the skew", {"now": NOW - 60_000 - 30_000}),
    ("expired", {"now": NOW + 60_000}),
    ("last moment", {"now": NOW + 59_999}),
    ("another capability", {"target": Target(capability="org.other.thing")}),
    ("no target", {"target": None}),
    ("claimed resource in scope", {"claim": {"resource": "repo:1"}, "target": Target(capability=CAP)}),
    ("claimed resource outside", {"claim": {"resource": "repo:2"}}),
    ("claimed action outside", {"claim": {"action": "write", "resource": "repo:1"}}),
    ("claimed other capability", {"claim": {"capability": "org.other.thing"}}),
    ("revoked", {"revoke": True}),
]


@pytest.mark.parametrize(("name", "case"), CASES, ids=[name for name, _ in CASES])
def test_a_known_chain_is_decided_as_the_table_decides(name: str, case: dict[str, Any]) -> None:
    store = MemoryRevocations()
    cached, uncached = verifiers(store)
    ev = evidence(LINKS)
    # First sight: both run the table; the caching verifier keeps the chain.
    first = cached.evaluate(typ=INVOKE, evidence=ev, caller=did("D"), target=TARGET, now_ms=NOW)
    assert first.allowed, first.error
    assert cached.verifications == 3
    if case.get("revoke"):
        store.record_revocation(revoke(IDS["B"], delegation_id="delegation:1", revoked_at=NOW - 1), NOW)
    if "claim" in case:
        ev = {**ev, "target": case["claim"]}
    target = case.get("target", TARGET)
    request = {"typ": INVOKE, "evidence": ev, "caller": did(case.get("caller", "D")), "target": target,
               "now_ms": case.get("now", NOW)}
    known = cached.evaluate(**request)
    assert cached.verifications == 3  # from the cache: no signature checked again
    table = uncached.evaluate(**request)
    assert uncached.verifications in (0, 3)  # 0: refused at step 3, before the signatures
    assert seen(known) == seen(table)
    assert known.audit.to_json() | {"evaluated_at": 0} == table.audit.to_json() | {"evaluated_at": 0}


def test_the_short_path_runs_only_for_a_known_chain_on_cap_invoke() -> None:
    cached, _ = verifiers(MemoryRevocations())
    ev = evidence(LINKS)
    assert cached.evaluate(typ=INVOKE, evidence=ev, caller=did("D"), target=TARGET, now_ms=NOW).allowed
    # Another message type is still step 1's 4001, cached chain or not (A.18).
    other = cached.evaluate(typ=int(MessageType.CAP_QUERY), evidence=ev, caller=did("D"), target=TARGET, now_ms=NOW)
    assert other.error is not None and other.error.code == 4001 and other.step is Step.MESSAGE_TYPE
    # Evidence that does not parse is step 2's, whatever the cache holds.
    bad = cached.evaluate(typ=INVOKE, evidence={"chain": "x"}, caller=did("D"), target=TARGET, now_ms=NOW)
    assert bad.error is not None and bad.error.code == 3004 and bad.step is Step.PARSE
