"""What a capability manifest is, once read: :class:`Manifest` (its schema
bundle, its capabilities, its ``[mcp_server.NAME]`` tables), each
:class:`CapabilitySpec` (descriptor + RFC 004 §8 :class:`Policy` + binding),
and :class:`ManifestFiles`, the file system the readers are handed (they
read no files themselves).

Split out of :mod:`ampcap.caps.manifest` (the loader), which re-exports the
public names; the readers build these values.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from .binding.kinds import Binding
from .bundle import SchemaBundle, SchemaStore
from .descriptor import Descriptor
from .binding.other_protocols import McpServer
from .semver import Version

__all__ = ["Policy", "ManifestFiles", "CapabilitySpec", "Manifest", "DescriptorSigner", "canonical_json",
           "string_list"]


class Policy(enum.Enum):
    """RFC 004 §8 provider compatibility policy."""

    STRICT = "strict"  # exact version only
    RANGE = "range"  # any version in supported_ranges may be negotiated
    BRIDGE = "bridge"  # provider adapts between versions (documented in notes)


class ManifestFiles(Protocol):
    """The file system as a manifest file sees it (implemented by
    :class:`ampcap.files.manifest.DiskFiles`)."""

    @property
    def base_dir(self) -> Path:
        """The manifest's directory: relative paths in it start there."""
        ...

    def read(self, path: Path, limit: int) -> bytes:
        """At most ``limit + 1`` bytes of a regular file; ``OSError`` otherwise."""
        ...

    def resolve(self, path: Path) -> Path:
        """``path`` made absolute, links followed (a ``python_path`` entry)."""
        ...

    def is_dir(self, path: Path) -> bool: ...

    def missing_program(self, program: str, workdir: Path | None, env: Mapping[str, str]) -> str | None:
        """Why a command binding's ``program`` could not be started, or None."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CapabilitySpec:
    """A capability as the daemon serves it: descriptor + policy + binding."""

    descriptor: Descriptor
    policy: Policy
    binding: Binding
    input_schema: Any
    output_schema: Any
    input_source: str  # "inline" or the schema file path as written
    output_source: str
    # policy "bridge": "module:function" adapting a request for another
    # version (one inside supported_ranges) to this version's params.
    bridge: str | None = None
    # Optional: "module:function" mapping this version's result back to the
    # requested version's shape (manifest: bridge = { params = …, result = … }).
    bridge_result: str | None = None
    # idempotent = true: running it twice does no harm, so an invoke a
    # restart interrupted runs again on retry instead of 5002 (ruling R19).
    idempotent: bool = False
    # price = { amount_minor, asset, network } (RFC 007, docs/payments.md):
    # a call needs a captured payment named by params["$payment"]; checked
    # here for shape only, served by `serve --payments`.
    price: tuple[int, str, str] | None = None

    @property
    def id(self) -> str:
        return self.descriptor.id

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    def version(self) -> Version:
        return self.descriptor.version

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.descriptor.aliases


@dataclass(frozen=True, slots=True)
class DescriptorSigner:
    """``descriptor_signer`` (RFC 004 §5.2): who signs the descriptors.
    ``key_file`` None means the daemon's own identity (``"identity"``)."""

    key_file: Path | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    source: str
    bundle: SchemaBundle
    capabilities: tuple[CapabilitySpec, ...]
    # [mcp_server.NAME] tables (the bindings that use one carry it too).
    mcp_servers: Mapping[str, McpServer] = field(default_factory=lambda: MappingProxyType({}))
    # Who should sign the descriptors, and (once caps.descriptor_signing did) who did.
    descriptor_signer: DescriptorSigner | None = None
    signed_by: str | None = None

    def schema_store(self) -> SchemaStore:
        """An offline store that resolves every schema this manifest declares."""
        return SchemaStore([self.bundle], offline=True)

    def find(self, key: str) -> tuple[CapabilitySpec, ...]:
        """Capabilities matching an id, a name or an alias (newest first)."""
        hits = [c for c in self.capabilities if key in (c.id, c.name) or key in c.aliases]
        return tuple(sorted(hits, key=lambda c: c.version, reverse=True))


def canonical_json(value: Any) -> bytes:
    """Stable bytes for an inline schema, so its hash does not depend on
    TOML key order or whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def string_list(value: Any) -> list[str] | None:
    """``value`` if it is a TOML array of strings (the shape of several keys), else None."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None
