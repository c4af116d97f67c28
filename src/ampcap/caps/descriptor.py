"""Capability descriptors and schema references (RFC 004 §4.2).

A :class:`Descriptor` is what CAP_DECLARE carries for one capability version:
its id, input/output :class:`SchemaRef` with integrity hashes, and the version
ranges it claims. ``from_wire`` applies every §4.2 consistency rule and
``to_wire`` gives back exactly the map that was (or will be) signed.

Error classes follow ruling R6: a value of the wrong CBOR type or a missing
required key is a shape failure (1001, normally already caught by the CDDL
engine); a well-formed body whose fields disagree (``id`` that is not
``name:version``, a 31-byte sha-256 hash, a range with ``||``) is 4001.

OSSA metadata (``stability``, ``deprecated_by``, ``sunset_date``) and aliases
have no field in RFC 004, so they live on the object but never on the wire:
adding them there would change the signed bytes of every descriptor.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from ..errors import AmpError
from .semver import Range, Version

__all__ = [
    "DEFAULT_MEDIA_TYPE",
    "HASH_LENGTHS",
    "Stability",
    "SchemaRef",
    "Descriptor",
    "join_path",
]

DEFAULT_MEDIA_TYPE = "application/schema+json"
# RFC 004 §4.2: the only two algorithms, and the exact digest size of each.
HASH_LENGTHS: Mapping[str, int] = MappingProxyType({"sha-256": 32, "sha-512": 64})

_SHAPE = 1001  # wrong type / missing key: what the CDDL engine would report
_SEMANTIC = 4001  # well-formed, but the fields contradict each other


class Stability(enum.Enum):
    """OSSA stability levels, shown by the CLI and used for warnings."""

    EXPERIMENTAL = "experimental"
    BETA = "beta"
    STABLE = "stable"
    DEPRECATED = "deprecated"


def join_path(base: str, key: str | int) -> str:
    """``join_path("capabilities[0]", "hash") == "capabilities[0].hash"``."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def _require(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    if key not in obj:
        raise AmpError(_SHAPE, f"missing required field {key!r}", path=join_path(path, key))
    return _typed(obj[key], kind, join_path(path, key))


def _optional(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    if key not in obj:
        return None
    return _typed(obj[key], kind, join_path(path, key))


# Decoders may return read-only maps and tuples for CBOR maps and arrays.
_ACCEPTED: Mapping[type, tuple[type, ...]] = MappingProxyType({dict: (Mapping,), list: (list, tuple)})


def _typed(value: Any, kind: type, path: str) -> Any:
    # bool is an int subclass but never a legal value for any field here.
    if not isinstance(value, _ACCEPTED.get(kind, (kind,))) or isinstance(value, bool):
        raise AmpError(_SHAPE, f"expected {kind.__name__}, found {type(value).__name__}", path=path)
    return value


def _check_hash(hash_alg: str, digest: bytes, path: str) -> None:
    size = HASH_LENGTHS.get(hash_alg)
    if size is None:
        raise AmpError(_SEMANTIC, f"unknown hash_alg {hash_alg!r} (sha-256 or sha-512)", path=join_path(path, "hash_alg"))
    if len(digest) != size:
        raise AmpError(_SEMANTIC, f"{hash_alg} hash must be {size} bytes, found {len(digest)}", path=join_path(path, "hash"))


def _check_ref(hash_alg: str, digest: bytes, uri: str | None, bundle_id: str | None,
               artifact_key: str | None, path: str) -> None:
    _check_hash(hash_alg, digest, path)
    # §4.2: a ref needs a uri, or both local locators; half a locator is
    # neither and must not silently fall back to the network.
    if (bundle_id is None) != (artifact_key is None):
        missing = "artifact_key" if artifact_key is None else "bundle_id"
        raise AmpError(_SEMANTIC, "bundle_id and artifact_key must be given together", path=join_path(path, missing))
    if uri is None and bundle_id is None:
        raise AmpError(_SEMANTIC, "schema ref needs uri or bundle_id + artifact_key", path=path or None)


class SchemaRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where a schema artifact lives and what its bytes must hash to.

    ``media_type`` stays ``None`` when the sender omitted it, so that
    ``to_wire`` reproduces the signed map; read :attr:`effective_media_type`.
    """

    hash_alg: str
    hash: bytes
    uri: str | None = None
    bundle_id: str | None = None
    artifact_key: str | None = None
    media_type: str | None = None
    updated_at: str | None = None

    def __post_init__(self) -> None:
        _check_ref(self.hash_alg, self.hash, self.uri, self.bundle_id, self.artifact_key, "")

    @property
    def effective_media_type(self) -> str:
        return self.media_type or DEFAULT_MEDIA_TYPE

    @property
    def has_local_locator(self) -> bool:
        return self.bundle_id is not None and self.artifact_key is not None

    @classmethod
    def from_wire(cls, obj: Any, *, path: str = "") -> SchemaRef:
        obj = _typed(obj, dict, path or "schema_ref")
        fields = dict(
            hash_alg=_require(obj, "hash_alg", str, path),
            hash=_require(obj, "hash", bytes, path),
            uri=_optional(obj, "uri", str, path),
            bundle_id=_optional(obj, "bundle_id", str, path),
            artifact_key=_optional(obj, "artifact_key", str, path),
            media_type=_optional(obj, "media_type", str, path),
            updated_at=_optional(obj, "updated_at", str, path),
        )
        # Check with the caller's path before construction, so the error
        # names `capabilities[0].input_schema.hash`, not just `hash`.
        _check_ref(fields["hash_alg"], fields["hash"], fields["uri"], fields["bundle_id"],
                   fields["artifact_key"], path)
        return cls(**fields)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("uri", "bundle_id", "artifact_key"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["hash_alg"] = self.hash_alg
        out["hash"] = self.hash
        if self.media_type is not None:
            out["media_type"] = self.media_type
        if self.updated_at is not None:
            out["updated_at"] = self.updated_at
        return out

    def check_offline_profile(self, *, path: str = "") -> None:
        """Offline Registry Profile (§2.2, §4.2): local locators are REQUIRED."""
        if not self.has_local_locator:
            raise AmpError(
                _SEMANTIC,
                "Offline Registry Profile requires bundle_id and artifact_key",
                path=join_path(path, "bundle_id"),
            )


def _parse_version(text: str, path: str) -> Version:
    try:
        return Version.parse(text)
    except AmpError as exc:
        raise AmpError(_SEMANTIC, exc.message, path=path) from None


def _parse_ranges(obj: Mapping[str, Any], key: str, path: str) -> tuple[Range, ...] | None:
    items = _optional(obj, key, list, path)
    if items is None:
        return None
    out = []
    for i, item in enumerate(items):
        where = f"{join_path(path, key)}[{i}]"
        text = _typed(item, str, where)
        try:
            out.append(Range.parse(text))
        except AmpError as exc:
            raise AmpError(_SEMANTIC, exc.message, path=where) from None
    return tuple(out)


def _range_text(r: Range) -> str:
    # Prefer the text exactly as received, if the Range keeps it, so that a
    # re-encoded descriptor still matches its signature.
    text = getattr(r, "text", None)
    return text if isinstance(text, str) else str(r)


_RFC_KEYS = frozenset(
    {"id", "name", "version", "input_schema", "output_schema", "descriptor_sig",
     "supported_ranges", "deprecated_ranges", "notes"}
)


class Descriptor(msgspec.Struct, frozen=True, kw_only=True):
    """One versioned capability declaration (RFC 004 §4.2).

    ``supported_ranges``/``deprecated_ranges`` are ``None`` when absent on
    the wire (absent supported_ranges means "exact version only"), which is
    kept apart from an empty list so re-encoding never changes signed bytes.
    ``extensions`` holds map keys a newer revision added (§10 extends by
    field addition); they are carried through unchanged for the same reason.
    """

    id: str
    name: str
    version: Version
    input_schema: SchemaRef
    output_schema: SchemaRef
    descriptor_sig: bytes | None = None
    supported_ranges: tuple[Range, ...] | None = None
    deprecated_ranges: tuple[Range, ...] | None = None
    notes: str | None = None
    extensions: Mapping[str, Any] = msgspec.field(default_factory=lambda: MappingProxyType({}))
    # OSSA metadata: not part of RFC 004, never on the wire, never signed.
    stability: Stability = Stability.STABLE
    deprecated_by: str | None = None
    sunset_date: datetime.date | None = None
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.extensions, MappingProxyType):
            msgspec.structs.force_setattr(self, "extensions", MappingProxyType(dict(self.extensions)))
        _check_identity(self.id, self.name, str(self.version), "")

    @classmethod
    def build(
        cls,
        name: str,
        version: str | Version,
        input_schema: SchemaRef,
        output_schema: SchemaRef,
        **kwargs: Any,
    ) -> Descriptor:
        """A descriptor whose ``id`` is derived, the common local case."""
        v = version if isinstance(version, Version) else _parse_version(version, "version")
        return cls(id=f"{name}:{v}", name=name, version=v, input_schema=input_schema,
                   output_schema=output_schema, **kwargs)

    @classmethod
    def from_wire(cls, obj: Any, *, path: str = "") -> Descriptor:
        obj = _typed(obj, dict, path or "descriptor")
        ident = _require(obj, "id", str, path)
        name = _require(obj, "name", str, path)
        version_text = _require(obj, "version", str, path)
        version = _parse_version(version_text, join_path(path, "version"))
        _check_identity(ident, name, version_text, path)
        inp = SchemaRef.from_wire(_require(obj, "input_schema", dict, path), path=join_path(path, "input_schema"))
        out = SchemaRef.from_wire(_require(obj, "output_schema", dict, path), path=join_path(path, "output_schema"))
        return cls(
            id=ident,
            name=name,
            version=version,
            input_schema=inp,
            output_schema=out,
            descriptor_sig=_optional(obj, "descriptor_sig", bytes, path),
            supported_ranges=_parse_ranges(obj, "supported_ranges", path),
            deprecated_ranges=_parse_ranges(obj, "deprecated_ranges", path),
            notes=_optional(obj, "notes", str, path),
            extensions={k: v for k, v in obj.items() if k not in _RFC_KEYS},
        )

    def to_wire(self, *, include_sig: bool = True) -> dict[str, Any]:
        """The RFC 004 map; ``include_sig=False`` gives the signed payload map."""
        out: dict[str, Any] = dict(self.extensions)
        out.update(id=self.id, name=self.name, version=str(self.version),
                   input_schema=self.input_schema.to_wire(),
                   output_schema=self.output_schema.to_wire())
        if include_sig and self.descriptor_sig is not None:
            out["descriptor_sig"] = self.descriptor_sig
        if self.supported_ranges is not None:
            out["supported_ranges"] = [_range_text(r) for r in self.supported_ranges]
        if self.deprecated_ranges is not None:
            out["deprecated_ranges"] = [_range_text(r) for r in self.deprecated_ranges]
        if self.notes is not None:
            out["notes"] = self.notes
        return out

    def with_signature(self, sig: bytes | None) -> Descriptor:
        return msgspec.structs.replace(self, descriptor_sig=sig)

    def check_offline_profile(self, *, path: str = "") -> None:
        """Both schema refs must carry bundle_id + artifact_key (→ 4001)."""
        self.input_schema.check_offline_profile(path=join_path(path, "input_schema"))
        self.output_schema.check_offline_profile(path=join_path(path, "output_schema"))

    def is_deprecated_version(self, version: Version) -> bool:
        return any(r.contains(version) for r in self.deprecated_ranges or ())


def _check_identity(ident: str, name: str, version_text: str, path: str) -> None:
    if not name or ":" in name or any(ch.isspace() for ch in name):
        raise AmpError(_SEMANTIC, f"invalid capability name {name!r}", path=join_path(path, "name"))
    expected = f"{name}:{version_text}"
    if ident != expected:
        raise AmpError(_SEMANTIC, f"id {ident!r} must equal name:version ({expected!r})", path=join_path(path, "id"))
