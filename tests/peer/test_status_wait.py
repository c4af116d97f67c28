"""R20 in the sans-I/O core: with a publisher configured, a delegated invoke
whose revocation status is not cached waits (parked) for the edge to ask,
then is decided on the answer; one question per status however many
invokes wait for it; 5002 when the edge found no answer."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from exec_helpers import ALICE, BOB, ERROR, INVOKE, PROVIDER, SEAL, T0, DemoRegistry, DemoResolver, manifest, message, sends  # noqa: E402

from ampcap.caps.params import ParamsValidator  # noqa: E402
from ampcap.deleg.chain import ChainVerifier, VerifierConfig, evidence_body  # noqa: E402
from ampcap.deleg.credential import issue  # noqa: E402
from ampcap.deleg.revocation import MemoryRevocations, QueryResult, RevocationChecker, StatusCache  # noqa: E402
from ampcap.peer.executor import Execute, Executor  # noqa: E402
from ampcap.peer.status_wait import FetchStatus  # noqa: E402
from ampcap.wire.identity import DidKeyResolver  # noqa: E402

HOUR = 3_600_000


def _setup(fetch: bool = True) -> tuple[Executor, StatusCache]:
    cache = StatusCache()
    checker = RevocationChecker(store=MemoryRevocations(), cache=cache, publisher_for=lambda d: "did:web:publisher")
    verifier = ChainVerifier(DidKeyResolver(), checker, VerifierConfig(verifier_did=PROVIDER.did))
    m = manifest()
    resolver = DemoResolver(m)
    return Executor(registry=DemoRegistry(resolver), resolver=resolver, params=ParamsValidator(m.schema_store()),
                    seal=SEAL, delegation=verifier, fetch_statuses=fetch), cache


def _invoke(delegation_id: str, n: int = 0):
    cred = issue(ALICE, delegation_id=delegation_id, delegate=BOB.did, issued_at=T0 - 1000, expires_at=T0 + HOUR,
                 capabilities=["org.ampcap.demo.echo"])
    body = {"id": "org.ampcap.demo.echo:1.0.0", "params": {"message": f"m{n}"}, "delegation": evidence_body([cred])}
    return message(BOB, INVOKE, body, T0 + n)


def _status(delegation_id: str, status: str) -> QueryResult:
    return QueryResult(delegator=ALICE.did, delegation_id=delegation_id, status=status, updated_at=T0,
                       revoked_at=T0 - 1 if status == "revoked" else None)


def test_a_missing_status_parks_the_invoke_and_asks_once_for_all_who_need_it() -> None:
    ex, cache = _setup()
    key = (ALICE.did, "d-1")
    first = ex.handle(_invoke("d-1", 0), "c1", T0)
    assert [a for a in first if isinstance(a, FetchStatus)] == [FetchStatus((key,))]
    assert not sends(first) and not any(isinstance(a, Execute) for a in first)  # nothing decided yet
    for n in range(1, 4):  # the same status wanted again: no second question
        again = ex.handle(_invoke("d-1", n), f"c{n}", T0 + n)
        assert again == []
    assert ex.owes("c2")
    cache.put(_status("d-1", "active"))
    decided = ex.status_settled(key, T0 + 10)
    assert sum(isinstance(a, Execute) for a in decided) == 4 and not sends(decided)
    assert ex.status_settled(key, T0 + 11) == []  # settled once


def test_a_revoked_answer_is_3004_and_no_answer_is_5002() -> None:
    ex, cache = _setup()
    ex.handle(_invoke("d-gone"), "c1", T0)
    ex.handle(_invoke("d-lost", 1), "c2", T0)
    cache.put(_status("d-gone", "revoked"))
    [refused] = sends(ex.status_settled((ALICE.did, "d-gone"), T0 + 5), ERROR)
    assert refused.conn == "c1" and refused.out.body["code"] == 3004
    [unavailable] = sends(ex.status_settled((ALICE.did, "d-lost"), T0 + 5), ERROR)  # the edge found nothing
    assert unavailable.conn == "c2" and unavailable.out.body["code"] == 5002


def test_without_a_fetching_edge_the_missing_status_is_5002_at_once() -> None:
    ex, _ = _setup(fetch=False)
    [refused] = sends(ex.handle(_invoke("d-1"), "c1", T0), ERROR)
    assert refused.out.body["code"] == 5002
