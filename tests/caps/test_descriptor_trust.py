"""Signed descriptors end to end: a manifest asks for them, the signing,
and a client's trust profile refusing in the RFC 004 §7.2 order (RFC 007
A.17a: 3001, A.17b: 5002, byte-level codes included), with its cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ampcap.caps.bundle import SchemaStore
from ampcap.caps.descriptor import Descriptor
from ampcap.caps.descriptor_signing import sign_manifest
from ampcap.caps.descriptor_trust import DescriptorChecker, DescriptorTrust, SignatureStatus, trust_from_mapping
from ampcap.caps.manifest import Manifest, manifest_from_data, manifest_problems
from ampcap.cli.main import main
from ampcap.errors import AmpError
from ampcap.files.identity import save_identity
from ampcap.files.manifest import load_manifest, sign_descriptors
from ampcap.pay.workflow import WORKFLOW_ID, WORKFLOW_NAME, capability_table
from ampcap.wire.cbor import dumps
from ampcap.wire.identity import Identity
from ampcap.wire.registry import error_body

PUBLISHER = Identity.from_seed(b"\x11" * 32)
INTRUDER = Identity.from_seed(b"\x22" * 32)
NOOP = {"python": "ampcap.caps.demo:noop"}


def _manifest(**top: Any) -> Manifest:
    echo = {"id": "org.example.echo:1.0.0", "input_schema": {"type": "object"},
            "output_schema": {"type": "object"}, "binding": NOOP}
    return manifest_from_data({"capability": [capability_table(NOOP), echo], **top})


def _payment(manifest: Manifest) -> Descriptor:
    return manifest.find(WORKFLOW_ID)[0].descriptor


def _checker(manifest: Manifest, *, artifacts: SchemaStore | None = None, **trust: Any) -> DescriptorChecker:
    owners = trust.pop("owners", {"org.agentries.payment": (PUBLISHER.did,), "org.example": (PUBLISHER.did,)})
    return DescriptorChecker(DescriptorTrust(owners=owners, **trust),
                             artifacts=artifacts if artifacts is not None else manifest.schema_store())


def _code(checker: DescriptorChecker, descriptor: Descriptor) -> int:
    with pytest.raises(AmpError) as err:
        checker.check(descriptor)
    return err.value.code


def test_a_signed_payment_descriptor_passes_a_profile_that_requires_it() -> None:
    manifest = sign_manifest(_manifest(), PUBLISHER)
    checker = _checker(manifest, require=frozenset({WORKFLOW_NAME}))
    verdict = checker.check(_payment(manifest))
    assert verdict.status is SignatureStatus.SIGNED and verdict.required
    assert manifest.signed_by == PUBLISHER.did


def test_a17a_missing_or_invalid_signature_is_3001() -> None:
    unsigned = _manifest()
    checker = _checker(unsigned, require=frozenset({WORKFLOW_NAME}))
    assert _code(checker, _payment(unsigned)) == 3001
    # Signed by a key the namespace owner does not hold.
    forged = sign_manifest(unsigned, INTRUDER)
    assert _code(_checker(forged, require=frozenset({WORKFLOW_NAME})), _payment(forged)) == 3001
    # Signed, then altered: the signature no longer covers the descriptor.
    signed = _payment(sign_manifest(unsigned, PUBLISHER))
    altered = Descriptor.from_wire({**signed.to_wire(), "notes": "cheaper now"})
    assert _code(checker, altered) == 3001
    # Byte-level: the ERROR body's code is CBOR uint 19 0b b9.
    assert bytes.fromhex("190bb9") in dumps(error_body(3001, "x"))


def test_a17b_unreachable_artifacts_are_5002_after_the_signature() -> None:
    manifest = sign_manifest(_manifest(), PUBLISHER)
    empty = SchemaStore([], offline=True)  # the integrity source is not there
    checker = _checker(manifest, artifacts=empty, require=frozenset({WORKFLOW_NAME}))
    assert _code(checker, _payment(manifest)) == 5002
    assert bytes.fromhex("19138a") in dumps(error_body(5002, "x"))
    # §7.2 / RFC 007 §8 order: an unsigned descriptor with missing artifacts is 3001.
    assert _code(checker, _payment(_manifest())) == 3001


def test_requirements_are_per_capability_or_for_all() -> None:
    unsigned = _manifest()
    echo = unsigned.find("org.example.echo")[0].descriptor
    per_cap = _checker(unsigned, require=frozenset({WORKFLOW_ID}))
    assert per_cap.check(echo).status is SignatureStatus.UNSIGNED
    assert _code(per_cap, _payment(unsigned)) == 3001
    assert _code(_checker(unsigned, require_all=True), echo) == 3001
    # A present signature must verify even where none is required (§4.2).
    forged = sign_manifest(unsigned, INTRUDER)
    assert _code(_checker(forged), forged.find("org.example.echo")[0].descriptor) == 3001


def test_verdicts_are_cached_but_unreachable_artifacts_are_retried() -> None:
    manifest = sign_manifest(_manifest(), PUBLISHER)
    calls: list[str] = []
    trust = DescriptorTrust(require_all=True, owners={"org.agentries.payment": (PUBLISHER.did,)})
    original = trust.resolve_key

    class Counting(DescriptorTrust, frozen=True):
        def resolve_key(self, name: str) -> list[bytes] | None:
            calls.append(name)
            return original(name)

    store = SchemaStore([], offline=True)
    checker = DescriptorChecker(Counting(require_all=True, owners=trust.owners), artifacts=store)
    for _ in range(2):
        assert _code(checker, _payment(manifest)) == 5002
    store.add_bundle(manifest.bundle)  # the artifacts arrive
    assert checker.check(_payment(manifest)).status is SignatureStatus.SIGNED
    checker.check(_payment(manifest))
    assert len(calls) == 3  # the two 5002 tries and the first success; the repeat was cached


def test_trust_profiles_from_configuration() -> None:
    trust = trust_from_mapping({"require_signatures": [WORKFLOW_NAME],
                                "owners": {"org.agentries.payment": [PUBLISHER.did]}})
    assert trust.resolve_key(WORKFLOW_NAME) == [PUBLISHER.public_key]
    assert trust.resolve_key("org.agentries.paymentsx") is None
    assert trust_from_mapping({"require_signatures": "all"}).require_all
    for bad in ({"require_signatures": 3}, {"owners": {"x": ["not a did"]}}, {"colour": 1}):
        with pytest.raises(AmpError) as err:
            trust_from_mapping(bad)
        assert err.value.code == 4001


def test_the_manifest_option_and_the_key_file(tmp_path: Path) -> None:
    save_identity(PUBLISHER, tmp_path / "publisher.json")
    data = {"descriptor_signer": {"key_file": "publisher.json"}, "capability": [capability_table(NOOP)]}
    (tmp_path / "m.toml").write_text(_toml(data))
    manifest = sign_descriptors(load_manifest(tmp_path / "m.toml"))
    assert manifest.signed_by == PUBLISHER.did
    assert _checker(manifest, require_all=True).check(_payment(manifest)).status is SignatureStatus.SIGNED
    # "identity": the daemon's key, given by serve.
    own = manifest_from_data({"descriptor_signer": "identity", "capability": [capability_table(NOOP)]})
    assert sign_descriptors(own).signed_by is None
    assert sign_descriptors(own, PUBLISHER).signed_by == PUBLISHER.did
    _, problems = manifest_problems({"descriptor_signer": {"key": "x"}, "capability": [capability_table(NOOP)]},
                                    source="m.toml")
    assert [p.key for p in problems] == ["descriptor_signer"]


def test_caps_show_prints_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_identity(PUBLISHER, tmp_path / "publisher.json")
    data = {"descriptor_signer": {"key_file": "publisher.json"}, "capability": [capability_table(NOOP)]}
    (tmp_path / "m.toml").write_text(_toml(data))
    assert main(["caps", "show", "--json", str(tmp_path / "m.toml"), WORKFLOW_ID]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["signature"] == f"signed by {PUBLISHER.did}, verifies"
    (tmp_path / "m.toml").write_text(_toml({**data, "descriptor_signer": {"key_file": "missing.json"}}))
    assert main(["caps", "show", str(tmp_path / "m.toml"), WORKFLOW_ID]) == 1
    assert "missing.json" in capsys.readouterr().err


def _toml(data: dict[str, Any]) -> str:
    """Just enough TOML for these manifests: inline tables via JSON values."""
    lines = []
    signer = data.get("descriptor_signer")
    if signer is not None:
        lines.append("descriptor_signer = " + (json.dumps(signer) if isinstance(signer, str)
                                               else "{ key_file = " + json.dumps(signer["key_file"]) + " }"))
    for cap in data["capability"]:
        lines.append("[[capability]]")
        for key in ("name", "version", "notes"):
            lines.append(f"{key} = {json.dumps(cap[key])}")
        lines.append("idempotent = true")
        lines.append('input_schema = { type = "object" }')
        lines.append('output_schema = { type = "object" }')
        lines.append('binding = { python = "ampcap.caps.demo:noop" }')
    return "\n".join(lines) + "\n"
