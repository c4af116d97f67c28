"""Descriptor signatures (RFC 004 §5.2, vector A.22)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import cbor2
import pytest
from nacl.signing import SigningKey

from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.descriptor_sig import TrustProfile, signing_payload, sign_descriptor, verify_descriptor
from ampcap.errors import AmpError
from ampcap.wire.cbor import dumps

OWNER_SEED = bytes(range(32))
OTHER_SEED = bytes(range(1, 33))
OWNER_PUB = bytes(SigningKey(OWNER_SEED).verify_key)


def descriptor() -> Descriptor:
    h = hashlib.sha256(b"{}").digest()
    ref = SchemaRef(bundle_id="b", artifact_key="k", hash_alg="sha-256", hash=h)
    return Descriptor.build("org.agentries.code-review", "2.1.0", ref, ref, notes="hash-valid")


def owner_keys(name: str) -> bytes:
    if name.startswith("org.agentries."):
        return OWNER_PUB
    raise AmpError(3001, "unknown namespace")


def rejected(desc: Descriptor, resolver: Callable[[str], object] | None = owner_keys,
             profile: TrustProfile = TrustProfile.PUBLIC) -> AmpError:
    with pytest.raises(AmpError) as info:
        verify_descriptor(desc, resolver, profile=profile)  # type: ignore[arg-type]
    return info.value


def test_sign_then_verify_public_profile() -> None:
    signed = sign_descriptor(descriptor(), OWNER_SEED)
    assert verify_descriptor(signed, owner_keys, profile=TrustProfile.PUBLIC) is True
    # survives the wire: encode, decode, verify
    again = Descriptor.from_wire(cbor2.loads(dumps(signed.to_wire())))
    assert verify_descriptor(again, owner_keys, profile=TrustProfile.PUBLIC) is True


def test_cose_sign1_structure_is_detached_eddsa() -> None:
    signed = sign_descriptor(descriptor(), OWNER_SEED, kid=b"did:web:agentries.org#k1")
    obj = cbor2.loads(signed.descriptor_sig)
    assert obj.tag == 18
    protected, unprotected, payload, signature = obj.value
    assert protected == bytes.fromhex("a10127")  # {1: -8}
    assert unprotected == {4: b"did:web:agentries.org#k1"}
    assert payload is None
    sig_structure = dumps(["Signature1", protected, b"", signing_payload(signed)])
    SigningKey(OWNER_SEED).verify_key.verify(sig_structure, signature)


def test_payload_omits_descriptor_sig_and_is_deterministic() -> None:
    d = descriptor()
    signed = sign_descriptor(d, OWNER_SEED)
    assert signing_payload(signed) == signing_payload(d) == dumps(d.to_wire())
    assert b"descriptor_sig" not in signing_payload(signed)


def test_a22_missing_signature_public_profile_is_3001() -> None:
    assert rejected(descriptor()).code == 3001


def test_a22_bad_signature_public_profile_is_3001() -> None:
    forged = sign_descriptor(descriptor(), OTHER_SEED)
    assert rejected(forged).code == 3001


def test_a22_tampered_descriptor_is_3001() -> None:
    signed = sign_descriptor(descriptor(), OWNER_SEED)
    wire = signed.to_wire()
    wire["notes"] = "changed after signing"
    assert rejected(Descriptor.from_wire(wire)).code == 3001


@pytest.mark.parametrize("sig", [b"", b"\xff\xff", dumps([1, 2, 3]), dumps(cbor2.CBORTag(17, [b"", {}, None, b""])),
                                 dumps([dumps({1: -7}), {}, None, b"x" * 64])])
def test_a22_malformed_cose_is_3001(sig: bytes) -> None:
    assert rejected(descriptor().with_signature(sig)).code == 3001


def test_a22_unresolvable_owner_key_is_3001() -> None:
    signed = sign_descriptor(descriptor(), OWNER_SEED)
    assert rejected(signed, resolver=lambda name: None).code == 3001
    assert rejected(signed, resolver=lambda name: {}[name]).code == 3001
    assert rejected(signed, resolver=None).code == 3001
    other = Descriptor.build("com.other.tool", "1.0.0", signed.input_schema, signed.output_schema)
    assert rejected(sign_descriptor(other, OWNER_SEED)).code == 3001


def test_private_profile_allows_missing_but_not_bad() -> None:
    assert verify_descriptor(descriptor(), None, profile=TrustProfile.PRIVATE) is False
    forged = sign_descriptor(descriptor(), OTHER_SEED)
    assert rejected(forged, profile=TrustProfile.PRIVATE).code == 3001


def test_key_rotation_list_and_embedded_payload_accepted() -> None:
    d = descriptor()
    old = bytes(SigningKey(OTHER_SEED).verify_key)
    signed = sign_descriptor(d, OWNER_SEED)
    assert verify_descriptor(signed, lambda n: [old, OWNER_PUB], profile=TrustProfile.PUBLIC)
    # An embedded payload equal to the descriptor verifies; a different one does not.
    protected, unprotected, _, signature = cbor2.loads(signed.descriptor_sig).value
    embedded = d.with_signature(dumps([protected, unprotected, signing_payload(d), signature]))
    assert verify_descriptor(embedded, owner_keys, profile=TrustProfile.PUBLIC)
    wrong = d.with_signature(dumps([protected, unprotected, b"other", signature]))
    assert rejected(wrong).code == 3001


def test_path_in_error() -> None:
    with pytest.raises(AmpError) as info:
        verify_descriptor(descriptor(), owner_keys, profile=TrustProfile.PUBLIC, path="capabilities[0]")
    assert info.value.path == "capabilities[0].descriptor_sig"
