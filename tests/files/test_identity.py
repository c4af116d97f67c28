"""Identity key files: mode 0600 on write, refused when others can read them,
saved whole or not at all, and the default file created once."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ampcap.errors import AmpError
from ampcap.files.identity import default_identity_path, load_identity, load_or_create, save_identity
from ampcap.wire.identity import Identity


def test_key_file_round_trip_and_permissions(tmp_path: Path) -> None:
    ident = Identity.generate(os.urandom)
    path = save_identity(ident, tmp_path / "sub" / "id.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = load_identity(path)
    assert loaded.did == ident.did and loaded.seed == ident.seed and loaded.x25519_secret == ident.x25519_secret
    with pytest.raises(AmpError):
        save_identity(ident, path)  # no silent overwrite
    save_identity(ident, path, overwrite=True)
    os.chmod(path, 0o644)
    with pytest.raises(AmpError) as info:
        load_identity(path)
    assert "chmod 600" in info.value.message
    assert load_identity(path, allow_insecure=True).did == ident.did


def test_key_file_with_separate_x25519_and_did(tmp_path: Path) -> None:
    ident = Identity.from_seed(b"\x02" * 32, did="did:web:example.com:agent:bob", x25519_secret=b"\x0c" * 32)
    loaded = load_identity(save_identity(ident, tmp_path / "bob.json"))
    assert loaded.did == "did:web:example.com:agent:bob" and loaded.x25519_secret == b"\x0c" * 32


@pytest.mark.parametrize("content", ["not json", "[]", '{"ed25519_seed": "zz"}', '{"ed25519_seed": "00"}', "{}",
                                     '{"ed25519_seed": "' + "00" * 32 + '", "ed25519": "' + "11" * 32 + '"}'])
def test_bad_key_files(tmp_path: Path, content: str) -> None:
    path = tmp_path / "id.json"
    path.write_text(content)
    os.chmod(path, 0o600)
    with pytest.raises(AmpError) as info:
        load_identity(path)
    assert str(path) in info.value.message


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(AmpError) as info:
        load_identity(tmp_path / "nope.json")
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
    save_identity(old, path)
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        save_identity(Identity.generate(os.urandom), path, overwrite=True)
    assert path.read_bytes() == before and load_identity(path).did == old.did
    assert [p.name for p in tmp_path.iterdir()] == ["id.json"]
    monkeypatch.undo()
    with pytest.raises(AmpError, match="already exists"):
        save_identity(Identity.generate(os.urandom), path)  # no --force: refused, untouched
    assert path.read_bytes() == before
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(AmpError, match="already exists"):
        save_identity(Identity.generate(os.urandom), tmp_path / "dangling")
    new = Identity.generate(os.urandom)
    save_identity(new, path, overwrite=True)
    assert load_identity(path).did == new.did and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "id.json"]


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(200 << 20)  # sparse: costs no disk
    huge.chmod(0o600)
    with pytest.raises(AmpError, match="not an identity file"):
        load_identity(huge)


def test_load_or_create_makes_the_default_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    first, created = load_or_create(None, os.urandom)
    assert created == default_identity_path() and created.exists()
    assert stat.S_IMODE(created.stat().st_mode) == 0o600
    again, created_again = load_or_create(None, os.urandom)
    assert created_again is None and again.did == first.did
    explicit, none = load_or_create(created, os.urandom)
    assert none is None and explicit.did == first.did


def test_save_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    # Writing a key "over" /dev/null would lose it and narrow the device's mode.
    identity = Identity.generate(os.urandom)
    with pytest.raises(AmpError, match="not a regular file"):
        save_identity(identity, "/dev/null", overwrite=True)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(AmpError, match="not a regular file"):
        save_identity(identity, tmp_path / "fifo", overwrite=True)
    assert stat.S_IMODE(os.stat("/dev/null").st_mode) == 0o666


def _write_key(tmp_path: Path, **changes: object) -> Path:
    data = Identity.generate(os.urandom).to_json() | changes
    path = tmp_path / "id.json"
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def test_a_did_key_that_is_not_its_keys_is_refused(tmp_path: Path) -> None:
    # Accepted, it was announced by serve and refused by every peer with a
    # 3001 that blamed the peer ("malformed did:key").
    for did in ("did:key:zWRONG", Identity.generate(os.urandom).did):
        path = _write_key(tmp_path, did=did)
        expected = Identity.from_json(json.loads(path.read_text()) | {"did": None}).did
        with pytest.raises(AmpError) as info:
            load_identity(path)
        assert info.value.message == f"{path}: did does not match its key (expected {expected})"


def test_a_did_key_naming_its_own_key_is_kept(tmp_path: Path) -> None:
    ident = Identity.generate(os.urandom)
    for did in (ident.did, f"{ident.did}#{ident.did.removeprefix('did:key:')}"):
        path = save_identity(Identity.from_seed(ident.seed, did=did), tmp_path / "k.json", overwrite=True)
        assert load_identity(path).did == did


@pytest.mark.parametrize("did", ["did:web:\u202e\x1b[31m", "did:web:", "web:example.com", "did:WEB:example.com",
                                 "did:web:exa mple.com", "did:web:example.com\n", "did:web:example.com#k\u200f"])
def test_a_did_that_is_not_a_did_is_refused(tmp_path: Path, did: str) -> None:
    path = _write_key(tmp_path, did=did)
    with pytest.raises(AmpError) as info:
        load_identity(path)
    message = info.value.message
    assert message.startswith(f"{path}: 'did' is not a DID: ") and "did:METHOD:ID" in message
    assert not any(c in message for c in "\x1b\u202e\u200f\n")  # shown escaped


@pytest.mark.parametrize("did", ["did:web:example.com:agent:bob", "did:web:example.com%3A8443:a_b.c-d",
                                 "did:example:123#key-1"])
def test_other_dids_are_checked_for_syntax_only(tmp_path: Path, did: str) -> None:
    assert load_identity(_write_key(tmp_path, did=did)).did == did


@pytest.mark.parametrize("changes,needle", [
    ({"kind": "ssh-key"}, "'kind' is 'ssh-key', not an identity file (expected 'ampcap-identity')"),
    ({"version": 2}, "unsupported identity file version 2 (this ampcap reads version 1)"),
    ({"version": "1"}, "unsupported identity file version '1' (this ampcap reads version 1)"),
    ({"x25519": "00" * 32}, "'x25519' does not match the X25519 secret"),
])
def test_unknown_kinds_versions_and_wrong_public_keys_are_refused(tmp_path: Path, changes: dict[str, object],
                                                                  needle: str) -> None:
    path = _write_key(tmp_path, **changes)
    with pytest.raises(AmpError) as info:
        load_identity(path)
    assert info.value.message == f"{path}: {needle}"


def test_a_did_key_cannot_carry_a_foreign_x25519_secret(tmp_path: Path) -> None:
    # Peers derive a did:key's X25519 key from its Ed25519 one: what they
    # encrypt to it this secret could not open.
    data = Identity.generate(os.urandom).to_json()
    data["x25519_secret"] = "0c" * 32
    del data["x25519"]
    path = tmp_path / "id.json"
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    with pytest.raises(AmpError, match="'x25519_secret' does not belong to a did:key identity"):
        load_identity(path)


def test_a_key_file_without_kind_and_version_still_loads(tmp_path: Path) -> None:
    ident = Identity.generate(os.urandom)
    path = tmp_path / "hand.json"
    path.write_text(json.dumps({"ed25519_seed": ident.seed.hex()}))
    path.chmod(0o600)
    assert load_identity(path).did == ident.did
