"""Offline schema bundles and the schema store (RFC 004 §5.3, A.10, A.11).
Opening them on disk safely: tests/files/test_bundle.py."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

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


def test_a_bundle_from_any_reader_fails_closed_per_artifact() -> None:
    # What an archive gives (caps/bundle.py reads no files): a reader of
    # relative paths, each returning at most limit + 1 bytes or None.
    members = {"bundle.json": json.dumps({"bundle_id": "mem", "artifacts": {"a": "a.json", "gone": "gone.json"}})
               .encode(), "a.json": b"{}"}
    bundle = SchemaBundle.from_reader("<memory>", lambda rel, cap: members.get(rel, None))
    assert bundle.bundle_id == "mem" and bundle.keys() == {"a", "gone"} and bundle.read("a") == b"{}"
    with pytest.raises(AmpError) as gone:
        bundle.read("gone")  # declared, absent: 5002 when asked for, not when opened
    assert gone.value.code == 5002
    members["big.json"] = b"x" * 2048
    members["bundle.json"] = json.dumps({"bundle_id": "m", "artifacts": {"big": "big.json"}}).encode()
    with pytest.raises(AmpError, match="larger than 1024") as big:
        SchemaBundle.from_reader("<memory>", lambda rel, cap: members.get(rel, None)[: cap + 1],
                                 BundleLimits(max_artifact_bytes=1024))
    assert big.value.code == 5002


def test_a_lazy_artifact_that_cannot_be_read_is_5002() -> None:
    def unreadable(limit: int) -> bytes:
        raise PermissionError(13, "Permission denied")

    bundle = SchemaBundle("lazy", lazy={"k": unreadable, "ok": lambda limit: b"{}"})
    assert bundle.read("ok") == b"{}"
    with pytest.raises(AmpError, match="unreadable: Permission denied") as info:
        bundle.read("k")
    assert info.value.code == 5002
