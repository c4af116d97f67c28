"""Keyrings (spec map "Contracts"): entries, DID URL fragments, errors (files: tests/files)."""

from __future__ import annotations


import pytest

from ampcap.errors import AmpError
from ampcap.wire.identity import Identity
from ampcap.wire.keyring import Keyring, default_resolver

BOB_DID = "did:web:example.com:agent:bob"
BOB = Identity.from_seed(b"\x02" * 32, did=BOB_DID, x25519_secret=b"\x0c" * 32)
ENTRY = {"ed25519": BOB.public_key.hex(), "x25519": BOB.x25519_public.hex()}


def test_fragments_select_the_entry() -> None:
    ring = Keyring.from_mapping({BOB_DID: ENTRY, "did:web:x#key-1": {"ed25519": "11" * 32}})
    assert ring.ed25519_for(f"{BOB_DID}#{BOB_DID}") == BOB.public_key
    assert ring.ed25519_for("did:web:x#key-1") == b"\x11" * 32  # an entry keyed by the DID URL itself
    for unknown in (f"{BOB_DID}#key-9", "did:web:x", "did:web:x#key-2", "did:web:nobody"):
        with pytest.raises(AmpError) as info:
            ring.ed25519_for(unknown)
        assert info.value.code == 3001


def test_missing_x25519_is_3001() -> None:
    ring = Keyring.from_mapping({BOB_DID: {"ed25519": ENTRY["ed25519"]}})
    with pytest.raises(AmpError) as info:
        ring.x25519_for(BOB_DID)
    assert info.value.code == 3001


@pytest.mark.parametrize(
    "data, needle",
    [
        ([], "map DIDs"),
        ({"bob": ENTRY}, "must be DIDs"),
        ({BOB_DID: "abc"}, "must be an object"),
        ({BOB_DID: {"x25519": ENTRY["x25519"]}}, "missing 'ed25519'"),
        ({BOB_DID: {"ed25519": "zz"}}, "not valid hex"),
        ({BOB_DID: {"ed25519": "00" * 31}}, "32 bytes"),
        ({BOB_DID: {"ed25519": 5}}, "hex string"),
        ({BOB_DID: {**ENTRY, "colour": "red"}}, "unknown field"),
        ({BOB_DID: {**ENTRY, "ed25519_secret": "01" * 32}}, "does not match"),
        ({BOB_DID: {**ENTRY, "ed25519_secret": "02" * 32, "x25519_secret": "0d" * 32}}, "does not match"),
    ],
)
def test_bad_keyrings_name_file_and_entry(data: object, needle: str) -> None:
    with pytest.raises(AmpError) as info:
        Keyring.from_mapping(data, origin="keys.json")
    assert info.value.code == 1001
    assert needle in info.value.message and "keys.json" in info.value.message
    if isinstance(data, dict) and BOB_DID in data:
        assert BOB_DID in info.value.message


def test_default_resolver_chains_did_key_then_keyring() -> None:
    ring = Keyring.from_mapping({BOB_DID: ENTRY})
    alice = Identity.from_seed(b"\x01" * 32)
    resolver = default_resolver(ring)
    assert resolver.ed25519_for(alice.did) == alice.public_key
    assert resolver.ed25519_for(BOB_DID) == BOB.public_key
    with pytest.raises(AmpError) as info:
        default_resolver().ed25519_for(BOB_DID)
    assert info.value.code == 3001
