"""Capability manifests: the TOML file ``ampcap serve --manifest`` loads.

The format is documented with a commented example in ``docs/manifest.md``.
In short::

    bundle_id = "org.example.local"          # optional

    [[capability]]
    id = "org.example.greet:1.0.0"            # or name = … + version = …
    aliases = ["greet"]
    policy = "range"                          # strict | range | bridge
    supported_ranges = [">=1.0.0 <2.0.0"]
    stability = "stable"
    input_schema = "schemas/greet.input.json" # file, or an inline table
    output_schema = { type = "object" }
    binding = { python = "mypkg.greet:run" }  # or command = ["prog", "arg"]

Schemas become an in-memory :class:`SchemaBundle` (sha-256 over the file
bytes, or over canonical JSON of an inline table), and each descriptor points
at it by ``bundle_id`` + ``artifact_key``, so a manifest is already valid
under the Offline Registry Profile. :func:`manifest_problems` collects every
problem (file, capability, key, line) instead of stopping at the first one;
:func:`manifest_from_data` raises ``AmpError(4001)`` carrying them all.

This module reads no files: it is given parsed TOML, and a
:class:`ManifestFiles` for what a manifest refers to on disk (schema files,
``python_path``, command bindings' programs). :mod:`ampcap.files.manifest`
reads a manifest file and supplies the real file system; the demo set
(``demo.py``) and the Python API feed plain data through the same code.

This module is the loader: the top-level keys, ``python_path``, the checks
across capabilities, and the :class:`Manifest` it returns. The rest lives
beside it, and every public name stays importable from here:

- :mod:`ampcap.caps.manifest_model`: :class:`Manifest`, :class:`CapabilitySpec`,
  :class:`Policy`, :class:`ManifestFiles`, :func:`canonical_json`;
- :mod:`ampcap.caps.manifest_errors`: :class:`ManifestProblem`,
  :class:`ManifestError`, and how a problem finds its line;
- :mod:`ampcap.caps.capability_table`: one ``[[capability]]`` table;
- :mod:`ampcap.caps.binding.section`: its ``binding`` key, and
  :mod:`ampcap.caps.binding.tables`: the ``[mcp_server.NAME]`` tables and
  the mcp/http/grpc binding tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .binding.tables import read_mcp_servers
from .bundle import SchemaBundle
from .capability_table import MAX_SCHEMA_BYTES as MAX_SCHEMA_BYTES  # re-exported: it was defined here
from .capability_table import CapabilityReader, Declared
from .manifest_errors import Collector, ManifestError, ManifestProblem
from .manifest_model import (CapabilitySpec, DescriptorSigner, Manifest, ManifestFiles, Policy, canonical_json,
                             string_list)

__all__ = [
    "Policy",
    "CapabilitySpec",
    "Manifest",
    "ManifestProblem",
    "ManifestError",
    "ManifestFiles",
    "DescriptorSigner",
    "manifest_problems",
    "manifest_from_data",
    "canonical_json",
]

_TOP_KEYS = frozenset({"bundle_id", "python_path", "capability", "mcp_server", "descriptor_signer"})


def _signer(raw: Any, out: Collector, files: ManifestFiles | None) -> DescriptorSigner | None:
    """``descriptor_signer = "identity"`` or ``{ key_file = "path" }`` (relative to the manifest)."""
    if raw is None:
        return None
    if raw == "identity":
        return DescriptorSigner()
    key_file = raw.get("key_file") if isinstance(raw, dict) and set(raw) == {"key_file"} else None
    if not isinstance(key_file, str) or not key_file or "\x00" in key_file:
        out.add('must be "identity" or { key_file = "path to an identity key file" }', key="descriptor_signer")
        return None
    if files is None:
        out.add("key_file needs a manifest file to be relative to", key="descriptor_signer")
        return None
    return DescriptorSigner(files.base_dir / key_file)


def _cross_checks(out: Collector, declared: list[Declared]) -> None:
    """Problems between capabilities. They run over every capability whose
    id could be read, whatever else is wrong with it: one run shows them
    all (a capability with an unreadable id cannot clash with anything)."""
    seen: dict[str, int] = {}
    names = {cap.name for cap in declared}
    alias_owner: dict[str, str] = {}
    for cap in declared:
        if cap.id in seen:
            out.add(f"duplicate id (first declared by capability[{seen[cap.id]}])", index=cap.index, label=cap.id,
                    key="id")
        seen.setdefault(cap.id, cap.index)
        for alias in cap.aliases:
            if alias in names:
                out.add(f"alias {alias!r} is the name of another capability", index=cap.index, label=cap.id,
                        key="aliases")
            owner = alias_owner.setdefault(alias, cap.name)
            if owner != cap.name:
                out.add(f"alias {alias!r} already points to {owner!r}", index=cap.index, label=cap.id, key="aliases")


def manifest_problems(data: Any, *, source: str, text: str | None = None, files: ManifestFiles | None = None,
                      check_bindings: bool = False) -> tuple[Manifest | None, list[ManifestProblem]]:
    """The manifest in parsed TOML-shaped ``data``, or every problem found.
    ``text`` (the TOML source) gives problems their line numbers; ``files``
    gives schema files and ``python_path`` a directory to be relative to.
    ``check_bindings`` also imports python bindings and bridges and, with
    ``files``, looks up command bindings' programs and directories (what
    serving would need), instead of leaving those failures to the first
    invoke."""
    out = Collector(source, text)
    if not isinstance(data, dict):
        out.add("a manifest must be a table")
        return None, out.problems
    for key in sorted(set(data) - _TOP_KEYS):
        out.add("unknown top-level key (expected bundle_id, python_path, descriptor_signer, [[capability]] and "
                "[mcp_server.NAME] tables)", key=key)
    signer = _signer(data.get("descriptor_signer"), out, files)
    bundle_id = data.get("bundle_id", f"local.manifest.{Path(source).stem or 'inline'}")
    if not isinstance(bundle_id, str) or not bundle_id:
        out.add("must be a non-empty string", key="bundle_id")
        bundle_id = "local.manifest"
    tables = data.get("capability")
    if not isinstance(tables, list) or not tables:
        out.add("declares no capabilities: add at least one [[capability]] table", key="capability")
        return None, out.problems
    search_path: tuple[Path, ...] = ()
    raw_path = data.get("python_path", [])
    if string_list(raw_path) is None:
        out.add("must be a list of directories (relative to the manifest)", key="python_path")
    elif any("\x00" in d for d in raw_path):
        out.add("directories must not contain NUL characters", key="python_path")
    elif raw_path and files is None:
        out.add("python_path needs a manifest file to be relative to", key="python_path")
    elif files is not None:
        search_path = tuple(files.resolve(files.base_dir / d) for d in raw_path)
    artifacts: dict[str, bytes] = {}
    servers = read_mcp_servers(data.get("mcp_server"), lambda message, key: out.add(message, key=key),
                               files.base_dir if files else None,
                               files.missing_program if check_bindings and files is not None else None)
    reader = CapabilityReader(out, files, bundle_id, artifacts, check_bindings, search_path, servers)
    specs = []
    for index, table in enumerate(tables):
        spec = reader.read(index, table)
        if spec is not None:
            specs.append((index, spec))
    _cross_checks(out, reader.declared)
    if out.problems:
        # In file order (the cross-checks come last otherwise); problems
        # without a line (the file as a whole) first.
        return None, sorted(out.problems, key=lambda p: p.line or 0)
    bundle = SchemaBundle(bundle_id, artifacts=artifacts, source=source)
    return Manifest(source=source, bundle=bundle, capabilities=tuple(s for _, s in specs),
                    mcp_servers=MappingProxyType(servers), descriptor_signer=signer), []


def manifest_from_data(data: Mapping[str, Any], *, source: str = "<data>", files: ManifestFiles | None = None,
                       check_bindings: bool = False) -> Manifest:
    """Build a manifest from already-parsed TOML-shaped data (the demo set,
    the Python API), or raise :class:`ManifestError` (4001) listing every
    problem."""
    manifest, problems = manifest_problems(dict(data), source=source, files=files, check_bindings=check_bindings)
    if manifest is None:
        raise ManifestError(problems)
    return manifest
