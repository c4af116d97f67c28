"""Identities, did:key, resolvers and the keygen/id commands (key files: tests/files)."""

from __future__ import annotations

import argparse
import json
import stat
from pathlib import Path

import pytest

from ampcap.cli.errors import CommandError
from ampcap.errors import AmpError
from ampcap.wire.didkey import b58decode, b58encode, did_key_from_ed25519, ed25519_from_did_key, x25519_from_did_key
from ampcap.wire.identity import ChainResolver, DidKeyResolver, Identity, KeyResolver

# Published in the W3C did:key specification: an Ed25519 did:key and the X25519
# key agreement key derived from it.
SPEC_DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
SPEC_X25519 = "z6LSj72tK8brWgZja8NLRwPigth2T9QRiG1uH9oKZuKjdh9p"


def test_base58_codec() -> None:
    assert b58encode(b"") == ""
    assert b58encode(b"\x00\x00\x01") == "112"
    assert b58encode(b"hello world") == "StV1DL6CwTryKyV"
    for data in (b"\x00", b"\x00\xff", bytes(range(40)), b"\xff" * 34):
        assert b58decode(b58encode(data)) == data
    with pytest.raises(ValueError):
        b58decode("0OIl")


def test_did_key_published_vector_and_x25519_derivation() -> None:
    ed = ed25519_from_did_key(SPEC_DID)
    assert did_key_from_ed25519(ed) == SPEC_DID
    x = x25519_from_did_key(SPEC_DID)
    assert "z" + b58encode(b"\xec\x01" + x) == SPEC_X25519
    # DID URL fragments name the DID's own keys
    assert ed25519_from_did_key(f"{SPEC_DID}#{SPEC_DID[8:]}") == ed
    assert x25519_from_did_key(f"{SPEC_DID}#{SPEC_X25519}") == x
    with pytest.raises(AmpError) as info:
        ed25519_from_did_key(f"{SPEC_DID}#key-2")
    assert info.value.code == 3001


def test_identity_did_is_a_did_key_with_ed25519_multicodec() -> None:
    ident = Identity.from_seed(bytes(range(32)))
    assert ident.did.startswith("did:key:z6Mk")
    assert b58decode(ident.did[9:])[:2] == b"\xed\x01"
    assert ed25519_from_did_key(ident.did) == ident.public_key
    assert x25519_from_did_key(ident.did) == ident.x25519_public


@pytest.mark.parametrize("bad", ["did:web:example.com", "did:key:z", "did:key:zzzz", "did:key:x6Mk",
                                 "did:key:z6LSj72tK8brWgZja8NLRwPigth2T9QRiG1uH9oKZuKjdh9p", "did:key:z0OIl",
                                 "did:key:z" + "2" * 500])
def test_bad_did_keys_are_3001(bad: str) -> None:
    with pytest.raises(AmpError) as info:
        DidKeyResolver().ed25519_for(bad)
    assert info.value.code == 3001


def test_generate_uses_injected_entropy() -> None:
    a = Identity.generate(lambda n: b"\x01" * n)
    b = Identity.generate(lambda n: b"\x01" * n)
    assert a.did == b.did and a.seed == b"\x01" * 32
    assert a.sign(b"m") == b.sign(b"m") and len(a.sign(b"m")) == 64
    with pytest.raises(AmpError):
        Identity.generate(lambda n: b"\x01")


def test_chain_resolver() -> None:
    class Fixed:
        def ed25519_for(self, did: str) -> bytes:
            if did == "did:web:x":
                return b"\x01" * 32
            raise AmpError(3001, "unknown")

        def x25519_for(self, did: str) -> bytes:
            raise AmpError(3001, "unknown")

    chain = ChainResolver(DidKeyResolver(), Fixed())
    assert isinstance(chain, KeyResolver)
    assert chain.ed25519_for("did:web:x") == b"\x01" * 32
    assert chain.ed25519_for(SPEC_DID) == ed25519_from_did_key(SPEC_DID)
    with pytest.raises(AmpError) as info:
        chain.x25519_for("did:web:x")
    assert info.value.code == 3001


# ------------------------------------------------------------------ CLI


def run_cli(*argv: str) -> int:
    from ampcap.cli import keys

    parser = argparse.ArgumentParser(prog="ampcap")
    sub = parser.add_subparsers(dest="command")
    keys.register(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_keygen_and_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "me.json"
    assert run_cli("keygen", "--out", str(out)) == 0
    did = capsys.readouterr().out.strip()
    assert did.startswith("did:key:z6Mk")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert json.loads(out.read_text())["did"] == did
    with pytest.raises(CommandError, match="already exists"):
        run_cli("keygen", "--out", str(out))
    assert run_cli("keygen", "--out", str(out), "--force") == 0
    new_did = capsys.readouterr().out.strip()
    assert new_did != did
    assert run_cli("id", "--identity", str(out)) == 0
    assert capsys.readouterr().out.strip() == new_did


def test_id_uses_xdg_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert run_cli("keygen") == 0
    did = capsys.readouterr().out.strip()
    assert (tmp_path / "ampcap" / "identity.json").exists()
    assert run_cli("id") == 0
    assert capsys.readouterr().out.strip() == did


