"""Identities, key files, did:key, resolvers and the keygen/id commands."""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from ampcap.cli.errors import CommandError
from ampcap.errors import AmpError
from ampcap.wire.didkey import b58decode, b58encode, did_key_from_ed25519, ed25519_from_did_key, x25519_from_did_key
from ampcap.wire.identity import ChainResolver, DidKeyResolver, Identity, KeyResolver, default_identity_path

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


def test_key_file_round_trip_and_permissions(tmp_path: Path) -> None:
    ident = Identity.generate(os.urandom)
    path = ident.save(tmp_path / "sub" / "id.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = Identity.load(path)
    assert loaded.did == ident.did and loaded.seed == ident.seed and loaded.x25519_secret == ident.x25519_secret
    with pytest.raises(AmpError):
        ident.save(path)  # no silent overwrite
    ident.save(path, overwrite=True)
    os.chmod(path, 0o644)
    with pytest.raises(AmpError) as info:
        Identity.load(path)
    assert "chmod 600" in info.value.message
    assert Identity.load(path, allow_insecure=True).did == ident.did


def test_key_file_with_separate_x25519_and_did(tmp_path: Path) -> None:
    ident = Identity.from_seed(b"\x02" * 32, did="did:web:example.com:agent:bob", x25519_secret=b"\x0c" * 32)
    loaded = Identity.load(ident.save(tmp_path / "bob.json"))
    assert loaded.did == "did:web:example.com:agent:bob" and loaded.x25519_secret == b"\x0c" * 32


@pytest.mark.parametrize("content", ["not json", "[]", '{"ed25519_seed": "zz"}', '{"ed25519_seed": "00"}', "{}",
                                     '{"ed25519_seed": "' + "00" * 32 + '", "ed25519": "' + "11" * 32 + '"}'])
def test_bad_key_files(tmp_path: Path, content: str) -> None:
    path = tmp_path / "id.json"
    path.write_text(content)
    os.chmod(path, 0o600)
    with pytest.raises(AmpError) as info:
        Identity.load(path)
    assert str(path) in info.value.message


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(AmpError) as info:
        Identity.load(tmp_path / "nope.json")
    assert "ampcap keygen" in info.value.message


def test_default_identity_path() -> None:
    assert default_identity_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/ampcap/identity.json")
    assert default_identity_path({"HOME": "/home/u"}) == Path("/home/u/.config/ampcap/identity.json")
    # A relative XDG_CONFIG_HOME is ignored (XDG spec): the key must not follow the current directory.
    assert default_identity_path({"XDG_CONFIG_HOME": "conf", "HOME": "/home/u"}) == \
        Path("/home/u/.config/ampcap/identity.json")


def test_a_failed_save_keeps_the_old_key_and_leaves_nothing_behind(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "id.json"
    old = Identity.generate(os.urandom)
    old.save(path)
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        Identity.generate(os.urandom).save(path, overwrite=True)
    assert path.read_bytes() == before and Identity.load(path).did == old.did
    assert [p.name for p in tmp_path.iterdir()] == ["id.json"]
    monkeypatch.undo()
    with pytest.raises(AmpError, match="already exists"):
        Identity.generate(os.urandom).save(path)  # no --force: refused, untouched
    assert path.read_bytes() == before
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(AmpError, match="already exists"):
        Identity.generate(os.urandom).save(tmp_path / "dangling")
    new = Identity.generate(os.urandom)
    new.save(path, overwrite=True)
    assert Identity.load(path).did == new.did and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "id.json"]


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(200 << 20)  # sparse: costs no disk
    huge.chmod(0o600)
    with pytest.raises(AmpError, match="not an identity file"):
        Identity.load(huge)


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


def test_load_or_create_makes_the_default_once(tmp_path, monkeypatch) -> None:
    import os as _os
    import stat as _stat

    from ampcap.wire.identity import default_identity_path, load_or_create

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    first, created = load_or_create(None, _os.urandom)
    assert created == default_identity_path() and created.exists()
    assert _stat.S_IMODE(created.stat().st_mode) == 0o600
    again, created_again = load_or_create(None, _os.urandom)
    assert created_again is None and again.did == first.did
    explicit, none = load_or_create(created, _os.urandom)
    assert none is None and explicit.did == first.did


def test_save_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    # Writing a key "over" /dev/null would lose it and narrow the device's mode.
    identity = Identity.generate(os.urandom)
    with pytest.raises(AmpError, match="not a regular file"):
        identity.save("/dev/null", overwrite=True)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(AmpError, match="not a regular file"):
        identity.save(tmp_path / "fifo", overwrite=True)
    assert stat.S_IMODE(os.stat("/dev/null").st_mode) == 0o666
