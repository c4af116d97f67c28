"""Descriptors and schema refs: RFC 004 §4.2 consistency rules."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from ampcap.caps.descriptor import DEFAULT_MEDIA_TYPE, Descriptor, SchemaRef, Stability
from ampcap.caps.semver import Version
from ampcap.errors import AmpError

H256 = hashlib.sha256(b"{}").digest()
H512 = hashlib.sha512(b"{}").digest()


def ref(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"bundle_id": "b", "artifact_key": "k", "hash_alg": "sha-256", "hash": H256}
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def wire(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "org.agentries.code-review:2.1.0",
        "name": "org.agentries.code-review",
        "version": "2.1.0",
        "input_schema": ref(artifact_key="in"),
        "output_schema": ref(artifact_key="out"),
        "supported_ranges": [">=2.0.0 <3.0.0"],
    }
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def in_declare(desc: dict[str, Any]) -> AmpError:
    """Parse as the first entry of a CAP_DECLARE and return the error."""
    with pytest.raises(AmpError) as info:
        Descriptor.from_wire(desc, path="capabilities[0]")
    return info.value


def test_a1_cap_declare_descriptor_accepted() -> None:
    d = Descriptor.from_wire(wire(), path="capabilities[0]")
    assert d.id == "org.agentries.code-review:2.1.0"
    assert d.version == Version.parse("2.1.0")
    assert d.input_schema.effective_media_type == DEFAULT_MEDIA_TYPE
    assert d.stability is Stability.STABLE
    assert d.to_wire() == wire()


def test_roundtrip_keeps_every_optional_field_exactly() -> None:
    w = wire(notes="n", deprecated_ranges=[], descriptor_sig=b"\x01",
             input_schema=ref(uri="https://x/in.json", media_type="application/schema+json", updated_at="2026-01-01"))
    assert Descriptor.from_wire(w).to_wire() == w
    assert "supported_ranges" not in Descriptor.from_wire(wire(supported_ranges=None)).to_wire()


def test_unknown_extension_keys_are_carried_through() -> None:
    w = wire(x_vendor={"a": 1})
    assert Descriptor.from_wire(w).to_wire()["x_vendor"] == {"a": 1}


def test_to_wire_without_sig() -> None:
    d = Descriptor.from_wire(wire(descriptor_sig=b"sig"))
    assert "descriptor_sig" not in d.to_wire(include_sig=False)
    assert d.to_wire()["descriptor_sig"] == b"sig"


def test_ossa_metadata_never_on_the_wire() -> None:
    d = Descriptor.from_wire(wire())
    import datetime

    import msgspec

    d2 = msgspec.structs.replace(d, stability=Stability.DEPRECATED, deprecated_by="x:2.0.0",
                 sunset_date=datetime.date(2027, 1, 1), aliases=("old",))
    assert d2.to_wire() == d.to_wire()


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"id": "org.agentries.code-review:2.1.1"}, "capabilities[0].id"),
        ({"id": "org.agentries.other:2.1.0"}, "capabilities[0].id"),
        ({"version": "2.1", "id": "org.agentries.code-review:2.1"}, "capabilities[0].version"),
        ({"input_schema": ref(hash=H256[:31])}, "capabilities[0].input_schema.hash"),
        ({"output_schema": ref(hash_alg="sha-512")}, "capabilities[0].output_schema.hash"),
        ({"input_schema": ref(hash_alg="md5")}, "capabilities[0].input_schema.hash_alg"),
        ({"input_schema": ref(bundle_id=None, artifact_key=None)}, "capabilities[0].input_schema"),
        ({"input_schema": ref(artifact_key=None)}, "capabilities[0].input_schema.artifact_key"),
        ({"supported_ranges": [">=1.0.0 || <3.0.0"]}, "capabilities[0].supported_ranges[0]"),
        ({"deprecated_ranges": ["1.x"]}, "capabilities[0].deprecated_ranges[0]"),
    ],
)
def test_semantic_failures_are_4001_with_a_path(change: dict[str, Any], path: str) -> None:
    err = in_declare(wire(**change))
    assert err.code == 4001
    assert err.path == path


def test_sha512_hash_of_64_bytes_accepted() -> None:
    d = Descriptor.from_wire(wire(input_schema=ref(hash_alg="sha-512", hash=H512)))
    assert d.input_schema.hash == H512


def test_uri_only_ref_is_fine_outside_the_offline_profile() -> None:
    d = Descriptor.from_wire(wire(input_schema=ref(bundle_id=None, artifact_key=None, uri="https://r/in.json")))
    assert d.input_schema.uri == "https://r/in.json"
    with pytest.raises(AmpError) as info:
        d.check_offline_profile(path="capabilities[0]")
    assert info.value.code == 4001
    assert info.value.path == "capabilities[0].input_schema.bundle_id"
    Descriptor.from_wire(wire()).check_offline_profile()


@pytest.mark.parametrize(
    ("desc", "path"),
    [
        (wire(hash=None, name=None), "capabilities[0].name"),
        (wire(version=2), "capabilities[0].version"),
        (wire(input_schema=ref(hash="00" * 32)), "capabilities[0].input_schema.hash"),
        (wire(supported_ranges=">=1.0.0"), "capabilities[0].supported_ranges"),
        (wire(descriptor_sig="sig"), "capabilities[0].descriptor_sig"),
        ({k: v for k, v in wire().items() if k != "output_schema"}, "capabilities[0].output_schema"),
    ],
)
def test_shape_failures_are_1001(desc: dict[str, Any], path: str) -> None:
    err = in_declare(desc)
    assert err.code == 1001
    assert err.path == path


def test_not_a_map() -> None:
    with pytest.raises(AmpError) as info:
        Descriptor.from_wire(["x"])
    assert info.value.code == 1001


def test_build_derives_id_and_validates() -> None:
    r = SchemaRef(bundle_id="b", artifact_key="k", hash_alg="sha-256", hash=H256)
    d = Descriptor.build("org.x.tool", "1.0.0-rc.1", r, r)
    assert d.id == "org.x.tool:1.0.0-rc.1"
    with pytest.raises(AmpError) as info:
        Descriptor(id="a.b:1.0.0", name="a.c", version=Version.parse("1.0.0"), input_schema=r, output_schema=r)
    assert info.value.code == 4001


def test_schema_ref_constructor_checks() -> None:
    with pytest.raises(AmpError):
        SchemaRef(hash_alg="sha-256", hash=H256)
    with pytest.raises(AmpError):
        SchemaRef(uri="u", hash_alg="sha-256", hash=H512)


def test_from_wire_does_not_mutate_input() -> None:
    w = wire()
    before = copy.deepcopy(w)
    Descriptor.from_wire(w)
    assert w == before


def test_deprecated_ranges() -> None:
    d = Descriptor.from_wire(wire(deprecated_ranges=["<2.1.0"]))
    assert d.is_deprecated_version(Version.parse("2.0.5"))
    assert not d.is_deprecated_version(Version.parse("2.1.0"))
