"""RFC 004 Appendix A vectors at the capability layer (names, registry,
cursors, negotiation, offline bundles, descriptor signatures), with the
literal values of the RFC: A.1, A.2, A.3, A.4, A.7, A.10, A.11, A.14, A.15,
A.17, A.22. (A.5/A.6/A.8/A.9/A.12/A.13/A.16 and the rest are exercised
where they live: the executor, the invoker and the wire tests.)"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from ampcap.caps.bundle import SchemaStore
from ampcap.caps.catalog import Catalog
from ampcap.caps.descriptor import Descriptor
from ampcap.caps.descriptor_sig import TrustProfile, sign_descriptor
from ampcap.caps.manifest import manifest_from_data
from ampcap.caps.negotiate import negotiate, select
from ampcap.caps.params import ParamsValidator
from ampcap.caps.registry import Admission, Registry
from ampcap.caps.semver import Range, Version
from ampcap.errors import AmpError
from ampcap.files.bundle import open_bundle
from ampcap.caps.bodies import parse_query_body

KEY = b"vector-cursor-key-vector-cursor!"
NOW = 1_763_800_000_000
BUNDLE = Path(__file__).parent / "data" / "offline_bundle"
BUNDLE_ID = "org.agentries.schemas.2026-11"
NAME = "org.agentries.code-review"
OWNER_SEED = bytes(range(32))


def code_of(fn: Any) -> int:
    with pytest.raises(AmpError) as info:
        fn()
    return info.value.code


def offline_wire(version: str = "2.1.0", *, in_hash: bytes | None = None,
                 in_key: str = "org.agentries.code-review/2.1.0/input") -> dict[str, Any]:
    """A CAP_DECLARE descriptor with bundle locators and hashes, no uri."""
    return {
        "id": f"{NAME}:{version}", "name": NAME, "version": version,
        "input_schema": {"bundle_id": BUNDLE_ID, "artifact_key": in_key, "hash_alg": "sha-256",
                         "hash": in_hash or hashlib.sha256((BUNDLE / "code-review/input.schema.json").read_bytes()).digest()},
        "output_schema": {"bundle_id": BUNDLE_ID, "artifact_key": "org.agentries.code-review/2.1.0/output",
                          "hash_alg": "sha-256",
                          "hash": hashlib.sha256((BUNDLE / "code-review/output.schema.json").read_bytes()).digest()},
    }


def offline_registry(**admission: Any) -> Registry[Descriptor]:
    store = SchemaStore([open_bundle(BUNDLE)], offline=True)
    return Registry(cursor_key=KEY, admission=Admission(offline=True, store=store, **admission))


def provider(*versions: str, name: str = NAME) -> list[Any]:
    data = {"capability": [{"id": f"{name}:{v}", "input_schema": {}, "output_schema": {},
                            "binding": {"python": "ampcap.caps.demo:noop"}} for v in versions]}
    return sorted(manifest_from_data(data, source="<vector>").capabilities, key=lambda s: s.version)


# A.1 CAP_DECLARE positive: one descriptor org.agentries.code-review:2.1.0,
# id == name:version, valid schema hashes → accepted.
def test_a1_cap_declare_positive(no_network: None) -> None:
    reg = offline_registry()
    added = reg.add_declared({"capabilities": [offline_wire()]})
    assert [d.id for d in added] == ["org.agentries.code-review:2.1.0"]
    assert added[0].id == f"{added[0].name}:{added[0].version}"
    assert reg.get("org.agentries.code-review:2.1.0") is added[0]
    assert [d.id for d in reg.query(NAME, now_ms=NOW).items] == ["org.agentries.code-review:2.1.0"]


# A.2 Negotiation exact version: preferred 2.1.0, provider 2.0.0 and 2.1.0 → 2.1.0.
def test_a2_negotiation_exact_version_positive() -> None:
    offered = provider("2.0.0", "2.1.0")
    assert select(offered, version=None, preferred=Version.parse("2.1.0")).capability_id == \
        "org.agentries.code-review:2.1.0"
    assert negotiate({"capability": NAME, "negotiate": {"preferred": "2.1.0"}, "params": {}},
                     offered).capability_id == "org.agentries.code-review:2.1.0"


# A.3 Negotiation fallback: preferred 2.2.0, acceptable [2.1.0, 2.0.0],
# provider 2.0.0 and 2.1.0 → 2.1.0.
def test_a3_negotiation_fallback_positive() -> None:
    offered = provider("2.0.0", "2.1.0")
    chosen = negotiate({"capability": NAME, "negotiate": {"preferred": "2.2.0", "acceptable": ["2.1.0", "2.0.0"]},
                        "params": {}}, offered)
    assert chosen.capability_id == "org.agentries.code-review:2.1.0"


# A.4 Negotiation mismatch: range >=3.0.0 <4.0.0, provider supports 2.x → 4003.
def test_a4_negotiation_mismatch_negative() -> None:
    offered = provider("2.0.0", "2.1.0", "2.9.3")
    assert code_of(lambda: negotiate({"capability": NAME, "negotiate": {"range": ">=3.0.0 <4.0.0"}, "params": {}},
                                     offered)) == 4003
    assert code_of(lambda: select(offered, version=None, range_=Range.parse(">=3.0.0 <4.0.0"))) == 4003
    # and the same range as a CAP_QUERY filter: name matches, no version does → 4003 (§6.1)
    reg: Registry[Any] = Registry(cursor_key=KEY)
    for s in offered:
        reg.add(s)
    assert code_of(lambda: reg.query(NAME, version_range=Range.parse(">=3.0.0 <4.0.0"), now_ms=NOW)) == 4003


# A.7 Legacy alias: CAP_QUERY uses `type` without `capability` → accepted, and
# the resolver maps `type` to the canonical capability name.
def test_a7_legacy_alias_compatibility() -> None:
    data = {"capability": [{"id": f"{NAME}:{v}", "aliases": ["code-review"], "input_schema": {}, "output_schema": {},
                            "binding": {"python": "ampcap.caps.demo:noop"}} for v in ("2.0.0", "2.1.0")]}
    catalog = Catalog(manifest_from_data(data, source="<vector>").capabilities, cursor_key=KEY)
    request = parse_query_body({"filter": {"type": "code-review"}})
    assert request.legacy_type and request.name == "code-review"
    assert catalog.canonical_name("code-review") == NAME
    page = catalog.query(request, NOW)
    assert [d.id for d in page.descriptors] == ["org.agentries.code-review:2.1.0", "org.agentries.code-review:2.0.0"]
    assert {d.to_wire()["name"] for d in page.descriptors} == {NAME}  # replies carry the canonical name
    # `capability` wins over `type` when both are present (§6.1).
    both = parse_query_body({"filter": {"capability": NAME, "type": "something-else"}})
    assert [d.id for d in catalog.query(both, NOW).descriptors] == [d.id for d in page.descriptors]


# A.10 Offline registry: descriptor with bundle_id + artifact_key + hash
# metadata, no uri; the local bundle holds matching bytes → accepted in the
# Offline Registry Profile, and params validate without network.
def test_a10_offline_registry_positive(no_network: None) -> None:
    reg = offline_registry()
    (descriptor,) = reg.add_declared({"capabilities": [offline_wire()]})
    assert descriptor.input_schema.uri is None and descriptor.input_schema.has_local_locator
    validator = ParamsValidator(SchemaStore([open_bundle(BUNDLE)], offline=True))
    validator.validate_params(descriptor, {"repository": "agentries/rfcs", "pull_request": 42})
    assert code_of(lambda: validator.validate_params(descriptor, {"repository": "agentries/rfcs"})) == 4004
    # A ref without local locators is refused in this profile (4001) and not registered.
    online = offline_wire()
    online["input_schema"] = {"uri": "https://agentries.org/cap-registry/x.json", "hash_alg": "sha-256",
                              "hash": b"\x00" * 32}
    assert code_of(lambda: offline_registry().add_declared({"capabilities": [online]})) == 4001


# A.11 Offline artifact missing or hash mismatch → 5002 UNAVAILABLE.
@pytest.mark.parametrize("change", ["missing artifact", "hash mismatch", "unknown bundle"])
def test_a11_offline_artifact_missing_negative(change: str, no_network: None) -> None:
    if change == "missing artifact":
        wire = offline_wire(in_key="org.agentries.code-review/2.1.0/absent")
    elif change == "hash mismatch":
        wire = offline_wire(in_hash=hashlib.sha256(b"not the schema").digest())
    else:
        wire = offline_wire()
        wire["output_schema"] = {**wire["output_schema"], "bundle_id": "org.agentries.schemas.elsewhere"}
    reg = offline_registry()
    assert code_of(lambda: reg.add_declared({"capabilities": [wire]})) == 5002
    assert len(reg) == 0
    # The same at invocation time, for a descriptor admitted without the store check.
    validator = ParamsValidator(SchemaStore([open_bundle(BUNDLE)], offline=True))
    descriptor = Descriptor.from_wire(wire)
    params = {"repository": "agentries/rfcs", "pull_request": 42}

    def use() -> None:
        validator.validate_params(descriptor, params)
        validator.validate_result(descriptor, {"findings": []})

    assert code_of(use) == 5002


# A.14 CAP_QUERY limit=2, order="newest-first" over 5 descriptors, follow-up
# pages with the returned cursor → (name ASC, version DESC), no duplicates/skips.
def test_a14_cap_query_pagination_stability_positive() -> None:
    catalog = Catalog(provider("1.0.0", "2.0.0", "2.1.0", "1.5.0", "0.9.0"), cursor_key=KEY)
    body: dict[str, Any] = {"filter": {"capability": NAME}, "limit": 2, "order": "newest-first"}
    pages = []
    while True:
        page = catalog.query(parse_query_body(body), NOW)
        pages.append([str(d.version) for d in page.descriptors])
        if page.next_cursor is None:
            break
        body = {**body, "cursor": page.next_cursor}
    assert pages == [["2.1.0", "2.0.0"], ["1.5.0", "1.0.0"], ["0.9.0"]]


# A.15 CAP_QUERY with a malformed or expired cursor → 4001.
def test_a15_cap_query_invalid_cursor_negative() -> None:
    catalog = Catalog(provider("1.0.0", "2.0.0", "2.1.0", "1.5.0", "0.9.0"), cursor_key=KEY)
    body = {"filter": {"capability": NAME}, "limit": 2}
    cursor = catalog.query(parse_query_body(body), NOW).next_cursor
    assert cursor is not None
    assert code_of(lambda: catalog.query(parse_query_body({**body, "cursor": "not-a-cursor"}), NOW)) == 4001
    assert code_of(lambda: catalog.query(parse_query_body({**body, "cursor": cursor}), NOW + 3_600_000)) == 4001


# A.17 CAP_QUERY filter.capability = org.agentries.nonexistent → 4002, and
# no empty CAP_DECLARE.
def test_a17_cap_query_no_match_negative() -> None:
    catalog = Catalog(provider("2.1.0"), cursor_key=KEY)
    assert code_of(lambda: catalog.query(parse_query_body({"filter": {"capability": "org.agentries.nonexistent"}}),
                                         NOW)) == 4002
    assert code_of(lambda: catalog.query(parse_query_body({"filter": {"type": "org.agentries.nonexistent"}}),
                                         NOW)) == 4002


# A.22 Public Registry Trust Profile: a hash-valid descriptor whose
# descriptor_sig is missing or does not verify → 3001, and resolution and
# negotiation do not continue with it.
@pytest.mark.parametrize("sig", ["missing", "wrong key", "tampered"])
def test_a22_public_registry_descriptor_signature_required_negative(sig: str) -> None:
    owner = bytes(SigningKey(OWNER_SEED).verify_key)
    reg = offline_registry(trust=TrustProfile.PUBLIC, resolve_key=lambda name: owner)
    good = sign_descriptor(Descriptor.from_wire(offline_wire("2.0.0")), OWNER_SEED)
    reg.add_declared({"capabilities": [good.to_wire()]})  # a signed one is accepted
    candidate = Descriptor.from_wire(offline_wire("2.1.0"))
    if sig == "wrong key":
        candidate = sign_descriptor(candidate, bytes(range(1, 33)))
    elif sig == "tampered":
        signed = sign_descriptor(candidate, OWNER_SEED)
        candidate = Descriptor.from_wire({**signed.to_wire(), "notes": "changed after signing"})
    assert code_of(lambda: reg.add_declared({"capabilities": [candidate.to_wire()]})) == 3001
    assert reg.get("org.agentries.code-review:2.1.0") is None
    assert [d.id for d in reg.query(NAME, now_ms=NOW).items] == ["org.agentries.code-review:2.0.0"]
    assert code_of(lambda: negotiate({"id": "org.agentries.code-review:2.1.0", "params": {}},
                                     reg.versions(NAME))) == 4003
