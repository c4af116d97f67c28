"""Offline schema bundles and the schema store (RFC 004 §5.3, A.10, A.11)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from ampcap.caps.bundle import BundleLimits, SchemaBundle, SchemaStore
from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.params import ParamsValidator
from ampcap.errors import AmpError
from ampcap.files.bundle import open_bundle

DATA = Path(__file__).parent / "data" / "offline_bundle"
BUNDLE_ID = "org.agentries.schemas.2026-11"
IN_KEY = "org.agentries.code-review/2.1.0/input"
OUT_KEY = "org.agentries.code-review/2.1.0/output"


def sha256(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def offline_descriptor(in_hash: bytes | None = None, in_key: str = IN_KEY) -> Descriptor:
    """A CAP_DECLARE descriptor with bundle locators and no uri (A.10)."""
    return Descriptor.from_wire({
        "id": "org.agentries.code-review:2.1.0",
        "name": "org.agentries.code-review",
        "version": "2.1.0",
        "input_schema": {"bundle_id": BUNDLE_ID, "artifact_key": in_key, "hash_alg": "sha-256",
                         "hash": in_hash or sha256(DATA / "code-review/input.schema.json")},
        "output_schema": {"bundle_id": BUNDLE_ID, "artifact_key": OUT_KEY, "hash_alg": "sha-512",
                          "hash": hashlib.sha512((DATA / "code-review/output.schema.json").read_bytes()).digest()},
    }, path="capabilities[0]")


def archive(tmp_path: Path, kind: str, src: Path = DATA) -> Path:
    if kind == "dir":
        return src
    out = tmp_path / ("bundle.zip" if kind == "zip" else "bundle.tar.gz")
    files = [p for p in src.rglob("*") if p.is_file()]
    if kind == "zip":
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                zf.write(p, p.relative_to(src).as_posix())
    else:
        with tarfile.open(out, "w:gz") as tf:
            for p in files:
                tf.add(p, p.relative_to(src).as_posix())
    return out


@pytest.mark.parametrize("kind", ["dir", "zip", "tgz"])
def test_a10_offline_registry_positive(tmp_path: Path, kind: str, no_network: None) -> None:
    desc = offline_descriptor()
    desc.check_offline_profile()  # accepted in the Offline Registry Profile
    store = SchemaStore([open_bundle(archive(tmp_path, kind))], offline=True)
    validator = ParamsValidator(store)
    validator.validate_params(desc, {"repository": "agentries/rfcs", "pull_request": 42})
    assert validator.validate_result(desc, {"findings": ["ok"]}) == []
    with pytest.raises(AmpError) as info:  # and it really validates
        validator.validate_params(desc, {"repository": "agentries/rfcs"})
    assert info.value.code == 4004


@pytest.mark.parametrize("kind", ["dir", "zip", "tgz"])
def test_a11_offline_artifact_missing(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "src"
    shutil.copytree(DATA, src)
    (src / "code-review/input.schema.json").unlink()
    store = SchemaStore([open_bundle(archive(tmp_path, kind, src))])
    with pytest.raises(AmpError) as info:
        ParamsValidator(store).validate_params(offline_descriptor(), {"repository": "r", "pull_request": 1})
    assert info.value.code == 5002


def test_a11_offline_artifact_key_unknown() -> None:
    store = SchemaStore([open_bundle(DATA)])
    with pytest.raises(AmpError) as info:
        store.load_bytes(offline_descriptor(in_key="nope").input_schema)
    assert info.value.code == 5002


@pytest.mark.parametrize("kind", ["dir", "zip", "tgz"])
def test_a11_offline_hash_mismatch(tmp_path: Path, kind: str) -> None:
    store = SchemaStore([open_bundle(archive(tmp_path, kind))])
    desc = offline_descriptor(in_hash=hashlib.sha256(b"other bytes").digest())
    with pytest.raises(AmpError) as info:
        ParamsValidator(store).validate_params(desc, {})
    assert info.value.code == 5002  # never 4004: schema never verified


def test_tampered_file_after_open_fails_closed(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(DATA, src)
    store = SchemaStore([open_bundle(src)])
    desc = offline_descriptor()
    (src / "code-review/input.schema.json").write_text('{"type": "object"}')
    with pytest.raises(AmpError) as info:
        store.load_json(desc.input_schema)
    assert info.value.code == 5002


def test_unknown_bundle_and_uri_only_refs_are_5002_offline(no_network: None) -> None:
    store = SchemaStore([], offline=True, fetch=lambda uri: pytest.fail("fetch called offline"))
    h = hashlib.sha256(b"{}").digest()
    for ref in (SchemaRef(bundle_id="missing", artifact_key="k", hash_alg="sha-256", hash=h),
                SchemaRef(uri="https://example.com/s.json", hash_alg="sha-256", hash=h)):
        with pytest.raises(AmpError) as info:
            store.load_bytes(ref)
        assert info.value.code == 5002


def test_online_fetcher_is_hash_verified() -> None:
    body = b'{"type": "object"}'
    ref = SchemaRef(uri="https://example.com/s.json", hash_alg="sha-256", hash=hashlib.sha256(body).digest())
    assert SchemaStore(offline=False, fetch=lambda uri: body).load_json(ref) == {"type": "object"}
    with pytest.raises(AmpError) as info:
        SchemaStore(offline=False, fetch=lambda uri: body + b" ").load_bytes(ref)
    assert info.value.code == 5002

    def broken(uri: str) -> bytes:
        raise ConnectionError("down")

    with pytest.raises(AmpError) as info:
        SchemaStore(offline=False, fetch=broken).load_bytes(ref)
    assert info.value.code == 5002


def test_parsed_schemas_are_cached_by_hash() -> None:
    calls = []
    body = b'{"type": "object"}'

    def fetch(uri: str) -> bytes:
        calls.append(uri)
        return body

    ref = SchemaRef(uri="https://e/s.json", hash_alg="sha-256", hash=hashlib.sha256(body).digest())
    store = SchemaStore(offline=False, fetch=fetch)
    assert store.load_json(ref) is store.load_json(ref)
    assert len(calls) == 1


def test_unsupported_media_type_and_bad_json_are_5002() -> None:
    data = b"not json"
    bundle = SchemaBundle("b", artifacts={"k": data})
    store = SchemaStore([bundle])
    ref = SchemaRef(bundle_id="b", artifact_key="k", hash_alg="sha-256", hash=hashlib.sha256(data).digest())
    with pytest.raises(AmpError) as info:
        store.load_json(ref)
    assert info.value.code == 5002
    xml = SchemaRef(bundle_id="b", artifact_key="k", hash_alg="sha-256", hash=ref.hash, media_type="application/xml")
    with pytest.raises(AmpError) as info:
        store.load_bytes(xml)
    assert info.value.code == 5002


# ---------------------------------------------------------------- hostile bundles


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


def test_two_bundles_with_one_id_conflict() -> None:
    store = SchemaStore([SchemaBundle("a")])
    with pytest.raises(AmpError):
        store.add_bundle(SchemaBundle("a"))


def test_cache_does_not_hide_a_missing_artifact() -> None:
    data = b'{"type": "object"}'
    h = hashlib.sha256(data).digest()
    store = SchemaStore([SchemaBundle("b", artifacts={"k": data})])
    store.load_json(SchemaRef(bundle_id="b", artifact_key="k", hash_alg="sha-256", hash=h))
    with pytest.raises(AmpError) as info:
        store.load_json(SchemaRef(bundle_id="b", artifact_key="other", hash_alg="sha-256", hash=h))
    assert info.value.code == 5002


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
