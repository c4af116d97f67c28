"""Opening schema bundles on disk (directory, zip, tar.gz): nothing unsafe
(traversal, links, bombs) gets in, and every refusal is 5002 (RFC 004 §5.3).
What a bundle resolves to once open: tests/caps/test_bundle.py."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ampcap.caps.bundle import BundleLimits
from ampcap.errors import AmpError
from ampcap.files.bundle import open_bundle


def write_manifest(root: Path, artifacts: dict[str, Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "bundle.json").write_text(json.dumps({"bundle_id": "evil", "artifacts": artifacts}))


@pytest.mark.parametrize("path", ["../secret.json", "a/../../secret.json", "/etc/passwd", "C:/x.json", "a\\..\\b"])
def test_directory_bundle_path_traversal_refused(tmp_path: Path, path: str) -> None:
    (tmp_path / "secret.json").write_text("{}")
    write_manifest(tmp_path / "bundle", {"k": path})
    with pytest.raises(AmpError) as info:
        open_bundle(tmp_path / "bundle")
    assert info.value.code == 5002


def test_directory_bundle_symlink_escape_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text("{}")
    write_manifest(tmp_path / "bundle", {"k": "link.json"})
    (tmp_path / "bundle" / "link.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(AmpError) as info:
        open_bundle(tmp_path / "bundle")
    assert info.value.code == 5002


def test_zip_member_traversal_refused(tmp_path: Path) -> None:
    out = tmp_path / "evil.zip"
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("bundle.json", json.dumps({"bundle_id": "evil", "artifacts": {"k": "x.json"}}))
        zf.writestr("../../x.json", "{}")
    with pytest.raises(AmpError) as info:
        open_bundle(out)
    assert info.value.code == 5002


def test_tar_symlink_member_refused(tmp_path: Path) -> None:
    out = tmp_path / "evil.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        data = json.dumps({"bundle_id": "evil", "artifacts": {"k": "x.json"}}).encode()
        info = tarfile.TarInfo("bundle.json")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("x.json")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    with pytest.raises(AmpError) as info_:
        open_bundle(out)
    assert info_.value.code == 5002


def test_zip_bomb_is_capped(tmp_path: Path) -> None:
    out = tmp_path / "bomb.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bundle.json", json.dumps({"bundle_id": "b", "artifacts": {"k": "big.json"}}))
        zf.writestr("big.json", b" " * (8 << 20))  # compresses to a few KiB
    assert out.stat().st_size < 100_000
    with pytest.raises(AmpError) as info:
        open_bundle(out, limits=BundleLimits(max_artifact_bytes=1 << 20))
    assert info.value.code == 5002


def test_oversized_directory_artifact_is_5002(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"k": "big.json"})
    (tmp_path / "big.json").write_bytes(b" " * 2048)
    bundle = open_bundle(tmp_path, limits=BundleLimits(max_artifact_bytes=1024))
    with pytest.raises(AmpError) as info:
        bundle.read("k")
    assert info.value.code == 5002


@pytest.mark.parametrize("manifest", ["not json", "[]", '{"artifacts": {}}', '{"bundle_id": "x"}',
                                      '{"bundle_id": "x", "artifacts": {"k": 3}}'])
def test_bad_bundle_manifest(tmp_path: Path, manifest: str) -> None:
    (tmp_path / "bundle.json").write_text(manifest)
    with pytest.raises(AmpError) as info:
        open_bundle(tmp_path)
    assert info.value.code == 5002


def test_missing_and_unknown_format(tmp_path: Path) -> None:
    for p in (tmp_path / "nope", tmp_path / "x.rar"):
        if p.suffix:
            p.write_bytes(b"x")
        with pytest.raises(AmpError) as info:
            open_bundle(p)
        assert info.value.code == 5002
    (tmp_path / "broken.zip").write_bytes(b"PK not really")
    with pytest.raises(AmpError):
        open_bundle(tmp_path / "broken.zip")


def test_tar_with_huge_member_is_refused_before_reading(tmp_path: Path) -> None:
    out = tmp_path / "huge.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        data = json.dumps({"bundle_id": "b", "artifacts": {}}).encode()
        info = tarfile.TarInfo("bundle.json")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        big = tarfile.TarInfo("big.bin")
        big.size = 4 << 20
        tf.addfile(big, io.BytesIO(b"\0" * big.size))
    with pytest.raises(AmpError) as info_:
        open_bundle(out, limits=BundleLimits(max_artifact_bytes=1 << 20))
    assert info_.value.code == 5002


def test_a_directory_artifact_that_is_a_fifo_is_5002_not_a_hang(tmp_path: Path) -> None:
    import os

    write_manifest(tmp_path, {"k": "pipe.json"})
    os.mkfifo(tmp_path / "pipe.json")  # nobody writes it: reading it would block for ever
    bundle = open_bundle(tmp_path)
    with pytest.raises(AmpError, match="not a regular file") as info:
        bundle.read("k")
    assert info.value.code == 5002
