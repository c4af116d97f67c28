"""Offline schema bundles and the schema store (RFC 004 §5.2, §5.3).

A bundle is a set of schema artifacts addressed by ``(bundle_id,
artifact_key)``. On disk it is a directory, a ``.zip`` or a ``.tar.gz``
(``.tgz``) whose root holds ``bundle.json``::

    {
      "bundle_id": "org.example.schemas",
      "artifacts": {
        "org.example.greet/1.0.0/input":  "greet/input.schema.json",
        "org.example.greet/1.0.0/output": {"path": "greet/output.schema.json"}
      }
    }

Each artifact maps to a relative POSIX path inside the bundle (opening one
on disk is :mod:`ampcap.files.bundle`'s job). The bundle
itself states no hashes: the expected hash always comes from the descriptor's
schema-ref, and bytes are verified against it before anything parses them.

Failure policy (§5.3, "fail closed"): a missing, unreadable, oversized or
hash-mismatching artifact, a uri-only ref in offline mode, or a bundle whose
layout is unsafe (absolute paths, ``..``, links in archives, too many or too
large members) is ``AmpError(5002)``. Nothing here touches the network; an
online fetcher, if any, is injected by the edge.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

import msgspec

from ..errors import AmpError
from ..decoders import json_loads
from .descriptor import SchemaRef

__all__ = [
    "BUNDLE_MANIFEST",
    "BundleLimits",
    "SchemaBundle",
    "SchemaStore",
    "digest",
    "parse_bundle_manifest",
    "safe_relpath",
    "SUPPORTED_MEDIA_TYPES",
]

BUNDLE_MANIFEST = "bundle.json"
UNAVAILABLE = 5002
# §4.2: application/schema+json is MTI; plain JSON is the same bytes.
SUPPORTED_MEDIA_TYPES = frozenset({"application/schema+json", "application/json"})


class BundleLimits(msgspec.Struct, frozen=True):
    """Caps that keep a hostile bundle from exhausting memory (zip bombs)."""

    max_artifact_bytes: int = 1 << 20
    max_total_bytes: int = 16 << 20
    max_artifacts: int = 4096
    max_manifest_bytes: int = 1 << 20


def digest(hash_alg: str, data: bytes) -> bytes:
    if hash_alg == "sha-256":
        return hashlib.sha256(data).digest()
    if hash_alg == "sha-512":
        return hashlib.sha512(data).digest()
    raise AmpError(UNAVAILABLE, f"unsupported hash_alg {hash_alg!r}")


def safe_relpath(raw: Any, where: str) -> str:
    """A normalised relative POSIX path, or 5002 for anything that could
    escape the bundle root (absolute, ``..``, drive letters, backslashes)."""
    if not isinstance(raw, str) or not raw:
        raise AmpError(UNAVAILABLE, f"{where}: artifact path must be a non-empty string")
    if "\\" in raw or "\x00" in raw or raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise AmpError(UNAVAILABLE, f"{where}: unsafe artifact path {raw!r}")
    parts = [p for p in PurePosixPath(raw).parts if p != "."]
    if not parts or any(p == ".." for p in parts):
        raise AmpError(UNAVAILABLE, f"{where}: unsafe artifact path {raw!r}")
    return "/".join(parts)


def parse_bundle_manifest(data: bytes, source: str, limits: BundleLimits) -> tuple[str, dict[str, str]]:
    try:
        doc = json_loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AmpError(UNAVAILABLE, f"{source}: {BUNDLE_MANIFEST} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("bundle_id"), str) or not doc["bundle_id"]:
        raise AmpError(UNAVAILABLE, f"{source}: {BUNDLE_MANIFEST} needs a non-empty string 'bundle_id'")
    artifacts = doc.get("artifacts")
    if not isinstance(artifacts, dict):
        raise AmpError(UNAVAILABLE, f"{source}: {BUNDLE_MANIFEST} needs an 'artifacts' object")
    if len(artifacts) > limits.max_artifacts:
        raise AmpError(UNAVAILABLE, f"{source}: more than {limits.max_artifacts} artifacts")
    paths: dict[str, str] = {}
    for key, entry in artifacts.items():
        raw = entry.get("path") if isinstance(entry, dict) else entry
        paths[key] = safe_relpath(raw, f"{source}: artifact {key!r}")
    return doc["bundle_id"], paths


class SchemaBundle:
    """Artifacts of one bundle: in-memory bytes, or ``lazy`` loaders called
    when an artifact is needed (a directory's files, so a file deleted later
    is a 5002 at resolution time). A loader given ``limit`` returns at most
    ``limit + 1`` bytes or raises ``OSError``."""

    __slots__ = ("bundle_id", "source", "_bytes", "_lazy", "_missing", "_limits")

    def __init__(
        self,
        bundle_id: str,
        *,
        artifacts: Mapping[str, bytes] | None = None,
        lazy: Mapping[str, Callable[[int], bytes]] | None = None,
        missing: Iterable[str] = (),
        source: str = "<memory>",
        limits: BundleLimits = BundleLimits(),
    ) -> None:
        self.bundle_id = bundle_id
        self.source = source
        self._bytes: Mapping[str, bytes] = MappingProxyType(dict(artifacts or {}))
        self._lazy: Mapping[str, Callable[[int], bytes]] = MappingProxyType(dict(lazy or {}))
        self._missing = frozenset(missing)
        self._limits = limits

    def __repr__(self) -> str:
        return f"SchemaBundle({self.bundle_id!r}, source={self.source!r}, artifacts={len(self.keys())})"

    def keys(self) -> frozenset[str]:
        return frozenset(self._bytes) | frozenset(self._lazy) | self._missing

    def read(self, artifact_key: str) -> bytes:
        """Raw (unverified) artifact bytes; 5002 when absent or unreadable."""
        data = self._bytes.get(artifact_key)
        if data is not None:
            return data
        load = self._lazy.get(artifact_key)
        if load is None:
            raise AmpError(UNAVAILABLE, f"artifact {artifact_key!r} not in bundle {self.bundle_id!r}")
        limit = self._limits.max_artifact_bytes
        try:
            data = load(limit)
        except OSError as exc:
            raise AmpError(UNAVAILABLE, f"artifact {artifact_key!r} unreadable: {exc.strerror or exc}") from None
        if len(data) > limit:
            raise AmpError(UNAVAILABLE, f"artifact {artifact_key!r} larger than {limit} bytes")
        return data

    # ------------------------------------------------------------ building

    @classmethod
    def from_reader(
        cls, source: str, read: Callable[[str, int], bytes | None], limits: BundleLimits = BundleLimits()
    ) -> SchemaBundle:
        """A bundle whose every artifact is read now through ``read(rel_path,
        limit)`` (at most ``limit + 1`` bytes, None when absent): an archive's
        members, which cannot be read later once the archive is closed."""
        raw = read(BUNDLE_MANIFEST, limits.max_manifest_bytes)
        if raw is None:
            raise AmpError(UNAVAILABLE, f"{source}: no {BUNDLE_MANIFEST} at the archive root")
        if len(raw) > limits.max_manifest_bytes:
            raise AmpError(UNAVAILABLE, f"{source}: {BUNDLE_MANIFEST} too large")
        bundle_id, paths = parse_bundle_manifest(raw, source, limits)
        artifacts: dict[str, bytes] = {}
        missing: list[str] = []
        total = 0
        for key, rel in paths.items():
            data = read(rel, limits.max_artifact_bytes)
            if data is None:
                missing.append(key)  # fail closed later, per artifact
                continue
            if len(data) > limits.max_artifact_bytes:
                raise AmpError(UNAVAILABLE, f"{source}: artifact {key!r} larger than {limits.max_artifact_bytes} bytes")
            total += len(data)
            if total > limits.max_total_bytes:
                raise AmpError(UNAVAILABLE, f"{source}: bundle larger than {limits.max_total_bytes} bytes")
            artifacts[key] = data
        return cls(bundle_id, artifacts=artifacts, missing=missing, source=source, limits=limits)


class SchemaStore:
    """Resolves a :class:`SchemaRef` to verified bytes and parsed JSON.

    Parsed schemas are cached by locator + hash (§5.2: a descriptor is
    immutable while its hash is unchanged). The locator is part of the key
    so that a ref naming a *different* artifact with the same hash is still
    looked up, and fails closed if that artifact is missing. Bounded.

    ``offline=True`` (Offline Registry Profile) never calls ``fetch``; a ref
    without a matching local artifact is 5002. ``fetch`` (``uri -> bytes``)
    is the edge's injected network access for online mode.
    """

    def __init__(
        self,
        bundles: Iterable[SchemaBundle] = (),
        *,
        offline: bool = True,
        fetch: Callable[[str], bytes] | None = None,
        max_cached: int = 1024,
    ) -> None:
        self._bundles: dict[str, SchemaBundle] = {}
        for b in bundles:
            self.add_bundle(b)
        self.offline = offline
        self._fetch = fetch
        self._max_cached = max_cached
        self._parsed: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def add_bundle(self, bundle: SchemaBundle) -> None:
        if bundle.bundle_id in self._bundles and self._bundles[bundle.bundle_id] is not bundle:
            raise AmpError(UNAVAILABLE, f"two bundles claim bundle_id {bundle.bundle_id!r}")
        self._bundles[bundle.bundle_id] = bundle

    @property
    def bundles(self) -> Mapping[str, SchemaBundle]:
        return MappingProxyType(self._bundles)

    def load_bytes(self, ref: SchemaRef) -> bytes:
        """The artifact bytes, verified against ``ref.hash`` (else 5002)."""
        if ref.effective_media_type not in SUPPORTED_MEDIA_TYPES:
            raise AmpError(UNAVAILABLE, f"unsupported schema media_type {ref.effective_media_type!r}")
        data = self._locate(ref)
        if digest(ref.hash_alg, data) != ref.hash:
            where = ref.artifact_key or ref.uri
            raise AmpError(UNAVAILABLE, f"schema artifact {where!r} fails {ref.hash_alg} verification")
        return data

    def load_json(self, ref: SchemaRef) -> Any:
        key = (ref.bundle_id, ref.artifact_key, ref.uri, ref.hash_alg, ref.hash)
        if key in self._parsed:
            self._parsed.move_to_end(key)
            return self._parsed[key]
        data = self.load_bytes(ref)
        try:
            doc = json_loads(data)
        except (ValueError, UnicodeDecodeError):  # json_loads turns deep nesting into a ValueError
            raise AmpError(UNAVAILABLE, f"schema artifact {ref.artifact_key or ref.uri!r} is not valid JSON") from None
        if not isinstance(doc, (dict, bool)):
            raise AmpError(UNAVAILABLE, f"schema artifact {ref.artifact_key or ref.uri!r} is not a JSON Schema")
        self._parsed[key] = doc
        if len(self._parsed) > self._max_cached:
            self._parsed.popitem(last=False)
        return doc

    def _locate(self, ref: SchemaRef) -> bytes:
        # §5.3: local locators are preferred when both are present.
        if ref.has_local_locator:
            assert ref.bundle_id is not None and ref.artifact_key is not None
            bundle = self._bundles.get(ref.bundle_id)
            if bundle is not None:
                return bundle.read(ref.artifact_key)
            if self.offline or ref.uri is None:
                raise AmpError(UNAVAILABLE, f"schema bundle {ref.bundle_id!r} is not available locally")
        if self.offline:
            raise AmpError(UNAVAILABLE, f"offline profile: no local artifact for {ref.uri!r}")
        if self._fetch is None or ref.uri is None:
            raise AmpError(UNAVAILABLE, f"no way to fetch schema {ref.uri!r}")
        try:
            return self._fetch(ref.uri)
        except AmpError:
            raise
        except Exception as exc:  # the fetcher is foreign code: fail closed
            raise AmpError(UNAVAILABLE, f"fetching {ref.uri!r} failed: {exc}") from None
