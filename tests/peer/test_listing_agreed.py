"""R22, the provider's half, sans-I/O: the executor lists for CAP_QUERY
``"*"`` only on a link that agreed ``ampcap.list-all`` (the ``listing``
predicate the daemon gives it), and answers it anywhere else exactly as an
unknown name: 4002, or 3001 for a caller a capability rule refuses."""

from __future__ import annotations

import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from exec_helpers import ALICE, DECLARE, ERROR, QUERY, SEAL, T0, manifest, message, only_send  # noqa: E402

from ampcap.caps.catalog import Catalog  # noqa: E402
from ampcap.caps.params import ParamsValidator  # noqa: E402
from ampcap.peer.executor import Executor  # noqa: E402
from ampcap.peer.listing import agrees  # noqa: E402
from ampcap.peer.policy import ALLOW_ALL, Policy, parse_policy  # noqa: E402
from ampcap.wire.extensions import CANCEL, LISTING, OFFERED  # noqa: E402

STAR = {"filter": {"capability": "*"}}
UNKNOWN = {"filter": {"capability": "org.example.nothing_here"}}


def executor(listing: Any, policy: Policy = ALLOW_ALL) -> Executor:
    m = manifest()
    catalog = Catalog(list(m.capabilities), cursor_key=bytes(32))
    return Executor(registry=catalog, resolver=catalog, params=ParamsValidator(m.schema_store()), policy=policy,
                    seal=SEAL, listing=listing)


def answer(ex: Executor, body: dict[str, Any], conn: Hashable = "A") -> Any:
    return only_send(ex.handle(message(ALICE, QUERY, body), conn, T0)).out


def test_a_link_that_agreed_gets_the_listing() -> None:
    out = answer(executor(lambda conn, sender: conn == "A"), STAR)
    assert out.typ == DECLARE
    assert {d["name"] for d in out.body["capabilities"]} == {c.name for c in manifest().capabilities}


def test_a_link_that_did_not_agree_gets_what_an_unknown_name_gets() -> None:
    ex = executor(lambda conn, sender: conn == "A")
    refused, unknown = answer(ex, STAR, "B"), answer(ex, UNKNOWN, "B")
    assert refused.typ == unknown.typ == ERROR
    assert refused.body["code"] == unknown.body["code"] == 4002
    assert refused.body["message"] == "no capability named '*'"
    # No predicate (an executor built without the daemon's): no link agreed.
    assert answer(executor(None), STAR).body["code"] == 4002


def test_a_restricted_caller_without_the_extension_gets_the_one_denial() -> None:
    policy = parse_policy({"capability": [{"match": "org.ampcap.demo.math.*", "deny": [ALICE.did]}]})
    refused = answer(executor(lambda conn, sender: False, policy), STAR)
    unknown = answer(executor(lambda conn, sender: False, policy), UNKNOWN)
    assert refused.body == unknown.body and refused.body["code"] == 3001


def test_agrees_needs_the_name_and_the_peer_itself() -> None:
    assert agrees(frozenset(OFFERED), "did:key:a", None)
    assert agrees(frozenset({LISTING}), "did:key:a", "did:key:a")
    assert not agrees(frozenset({CANCEL}), "did:key:a", None)
    # Behind a relay (another DID than the one that said HELLO): nothing agreed.
    assert not agrees(frozenset(OFFERED), "did:key:relay", "did:key:a")
