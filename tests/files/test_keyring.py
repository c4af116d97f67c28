"""Keyring files: JSON or TOML by the name's suffix, and files that cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampcap.errors import AmpError
from ampcap.files.keyring import load_keyring
from ampcap.wire.identity import Identity

BOB_DID = "did:web:example.com:agent:bob"
BOB = Identity.from_seed(b"\x02" * 32, did=BOB_DID, x25519_secret=b"\x0c" * 32)
ENTRY = {"ed25519": BOB.public_key.hex(), "x25519": BOB.x25519_public.hex()}


def test_json_keyring(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({BOB_DID: ENTRY}))
    ring = load_keyring(path)
    assert ring.ed25519_for(BOB_DID) == BOB.public_key
    assert ring.x25519_for(BOB_DID) == BOB.x25519_public
    assert BOB_DID in ring and len(ring) == 1 and list(ring) == [BOB_DID]
    assert ring.x25519_secrets() == [] and ring.identities() == []


def test_toml_keyring_with_secrets(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(f'["{BOB_DID}"]\ned25519 = "{ENTRY["ed25519"]}"\nx25519 = "{ENTRY["x25519"]}"\n'
                    f'ed25519_secret = "{"02" * 32}"\nx25519_secret = "{"0c" * 32}"\n')
    ring = load_keyring(path)
    (ident,) = ring.identities()
    assert ident.did == BOB_DID and ident.sign(b"m") == BOB.sign(b"m")
    assert ring.x25519_secrets() == [b"\x0c" * 32]


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(AmpError):
        load_keyring(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AmpError) as info:
        load_keyring(bad)
    assert str(bad) in info.value.message
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("= = =")
    with pytest.raises(AmpError):
        load_keyring(bad_toml)
