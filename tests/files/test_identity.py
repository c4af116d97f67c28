"""Identity key files: mode 0600 on write, refused when others can read them,
saved whole or not at all, and the default file created once."""

from __future__ import annotations

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
