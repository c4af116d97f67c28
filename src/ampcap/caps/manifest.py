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
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import AmpError
from ..decoders import json_loads
from .binding_section import BindingSection
from .binding_tables import read_mcp_servers
from .bindings import resolve_callable
from .remote import McpServer
from .names import URI_SCHEMES, parse_ossa_uri
from .bundle import SchemaBundle
from .descriptor import Descriptor, SchemaRef, Stability
from .manifest_errors import Collector, ManifestError, ManifestProblem
from .manifest_model import CapabilitySpec, Manifest, ManifestFiles, Policy, canonical_json, string_list
from .params import compile_schema
from .semver import Range, Version

__all__ = [
    "Policy",
    "CapabilitySpec",
    "Manifest",
    "ManifestProblem",
    "ManifestError",
    "ManifestFiles",
    "manifest_problems",
    "manifest_from_data",
    "canonical_json",
]

MAX_SCHEMA_BYTES = 1 << 20
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9][A-Za-z0-9_-]*)+$")
_CAP_KEYS = frozenset({
    "id", "name", "version", "aliases", "notes", "stability", "deprecated_by", "sunset_date",
    "policy", "supported_ranges", "deprecated_ranges", "input_schema", "output_schema", "binding", "bridge",
    "binding_order",
    "idempotent",
})
_TOP_KEYS = frozenset({"bundle_id", "python_path", "capability", "mcp_server"})



class _CapabilityReader:
    """Turns one ``[[capability]]`` table into a spec, reporting problems."""

    def __init__(self, out: Collector, files: ManifestFiles | None, bundle_id: str,
                 artifacts: dict[str, bytes], check_bindings: bool,
                 search_path: tuple[Path, ...] = (), servers: Mapping[str, McpServer] | None = None) -> None:
        self.out = out
        self.search_path = search_path
        self.files = files
        self.bundle_id = bundle_id
        self.artifacts = artifacts
        self.check_bindings = check_bindings
        self.bindings = BindingSection(self.problem, files, servers or {}, search_path, check_bindings)
        # What each capability declares, as far as it could be read, for the
        # checks across capabilities: a duplicate id is news even beside
        # another problem of the same capability.
        self.declared: list[_Declared] = []

    def read(self, index: int, table: Any) -> CapabilitySpec | None:
        if not isinstance(table, dict):
            self.out.add("must be a table", index=index)
            return None
        self.index, self.label = index, None
        before = len(self.out.problems)
        name, version = self._identity(table)
        self.label = f"{name}:{version}" if name and version else None
        for key in sorted(set(table) - _CAP_KEYS):
            self.problem(f"unknown key (expected one of: {', '.join(sorted(_CAP_KEYS))})", key)
        policy, supported, deprecated = self._policy(table)
        stability, deprecated_by, sunset = self._stability(table)
        aliases = self._aliases(table, name)
        if name is not None and version is not None:
            self.declared.append(_Declared(index, f"{name}:{version}", name, tuple(aliases)))
        notes = table.get("notes")
        if notes is not None and not isinstance(notes, str):
            self.problem("must be a string", "notes")
        idempotent = table.get("idempotent", False)
        if not isinstance(idempotent, bool):
            self.problem("must be true or false", "idempotent")
        schemas = {}
        for which in ("input_schema", "output_schema"):
            schemas[which] = self._schema(table, which, name, version)
        binding = self.bindings.read(table.get("binding"), table.get("binding_order"))
        bridge, bridge_result = self._bridge(table, policy)
        in_schema, out_schema = schemas["input_schema"], schemas["output_schema"]
        if (len(self.out.problems) != before or name is None or version is None or binding is None
                or in_schema is None or out_schema is None):
            return None
        (in_ref, in_doc, in_src), (out_ref, out_doc, out_src) = in_schema, out_schema
        try:
            descriptor = Descriptor.build(
                name, version, in_ref, out_ref,
                supported_ranges=supported, deprecated_ranges=deprecated,
                notes=notes, stability=stability, deprecated_by=deprecated_by,
                sunset_date=sunset, aliases=tuple(aliases),
            )
        except AmpError as exc:
            self.problem(exc.message, exc.path)
            return None
        return CapabilitySpec(descriptor=descriptor, policy=policy, binding=binding,
                              input_schema=in_doc, output_schema=out_doc,
                              input_source=in_src, output_source=out_src, bridge=bridge,
                              bridge_result=bridge_result, idempotent=idempotent is True)

    def _bridge(self, table: Mapping[str, Any], policy: Policy) -> tuple[str | None, str | None]:
        """``bridge = "module:function"`` (params only) or
        ``bridge = { params = "module:function", result = "module:function" }``."""
        raw = table.get("bridge")
        if policy is not Policy.BRIDGE:
            if raw is not None:
                self.problem("only policy 'bridge' takes a bridge adapter", "bridge")
            return None, None
        params, result = raw, None
        if isinstance(raw, dict):
            for key in sorted(set(raw) - {"params", "result"}):
                self.problem("unknown key (expected params, result)", f"bridge.{key}")
            params, result = raw.get("params"), raw.get("result")
        targets = [("bridge", params)] + ([("bridge.result", result)] if result is not None else [])
        for key, target in targets:
            if not isinstance(target, str) or target.count(":") != 1:
                self.problem("policy 'bridge' needs bridge = \"module:function\" (the adapter), or a table "
                             "{ params = \"module:function\", result = \"module:function\" }", key)
                return None, None
            if self.check_bindings:
                try:
                    resolve_callable(target, self.search_path)
                except AmpError as exc:
                    self.problem(exc.message, key)
        return params, result

    def problem(self, message: str, key: str | None = None) -> None:
        self.out.add(message, index=self.index, label=self.label, key=key)

    def _identity(self, table: Mapping[str, Any]) -> tuple[str | None, Version | None]:
        ident, name, version = table.get("id"), table.get("name"), table.get("version")
        if isinstance(ident, str) and ident.startswith(URI_SCHEMES):
            # An OSSA/MCP URI names the capability: ossa:<domain>/<name>@M.m is
            # ossa.<domain>.<name> at M.m.0 (spec map, "Capability naming").
            try:
                ref = parse_ossa_uri(ident)
            except AmpError as exc:
                self.problem(exc.message, "id")
                return None, None
            assert ref is not None
            if name is not None or version is not None:
                self.problem("give either 'id' or 'name' + 'version', not both", "id")
                return None, None
            return ref.name, ref.version
        if ident is not None:
            if name is not None or version is not None:
                self.problem("give either 'id' or 'name' + 'version', not both", "id")
                return None, None
            if not isinstance(ident, str) or ":" not in ident:
                self.problem("must be a string 'name:version'", "id")
                return None, None
            name, _, version = ident.rpartition(":")
            key_name, key_version = "id", "id"
        else:
            key_name, key_version = "name", "version"
            if name is None or version is None:
                self.problem("each capability needs 'id', or 'name' and 'version'", "id")
                return None, None
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            self.problem(f"capability name {name!r} must be reverse-domain, e.g. org.example.tool", key_name)
            name = None
        parsed = None
        if not isinstance(version, str):
            self.problem("version must be a string", key_version)
        else:
            try:
                parsed = Version.parse(version)
            except AmpError as exc:
                self.problem(f"bad version {version!r}: {exc.message}", key_version)
        return name, parsed

    def _ranges(self, table: Mapping[str, Any], key: str) -> tuple[Range, ...] | None:
        if key not in table:
            return None
        items = string_list(table[key])
        if items is None:
            self.problem("must be a list of range strings", key)
            return None
        out = []
        for text in items:
            try:
                out.append(Range.parse(text))
            except AmpError as exc:
                self.problem(f"bad range {text!r}: {exc.message}", key)
        return tuple(out)

    def _policy(self, table: Mapping[str, Any]) -> tuple[Policy, tuple[Range, ...] | None, tuple[Range, ...] | None]:
        ident = table.get("id")
        if isinstance(ident, str) and ident.startswith(URI_SCHEMES) and "supported_ranges" not in table:
            # OSSA's compatibility rule (same major, minor at least the one
            # declared) becomes a `range` policy, unless the manifest says more.
            try:
                ref = parse_ossa_uri(ident)
            except AmpError:
                ref = None  # reported by _identity
            if ref is not None:
                table = {**table, "supported_ranges": [ref.compatible.text],
                         "policy": table.get("policy", "range")}
        before = len(self.out.problems)
        supported = self._ranges(table, "supported_ranges")
        unreadable = len(self.out.problems) > before  # given, but reported already
        deprecated = self._ranges(table, "deprecated_ranges")
        raw = table.get("policy", "range" if supported else "strict")
        try:
            policy = Policy(raw)
        except ValueError:
            self.problem(f"must be one of strict, range, bridge (found {raw!r})", "policy")
            return Policy.STRICT, supported, deprecated
        if policy is Policy.STRICT and supported:
            self.problem("policy 'strict' accepts the exact version only; drop supported_ranges or use 'range'", "supported_ranges")
        if policy is not Policy.STRICT and not supported and not unreadable:
            self.problem(f"policy '{policy.value}' needs supported_ranges", "policy")
        if policy is Policy.BRIDGE and not table.get("notes"):
            # RFC 004 §8: bridge behaviour MUST be documented.
            self.problem("policy 'bridge' must document its adaptation in 'notes'", "notes")
        return policy, supported, deprecated

    def _stability(self, table: Mapping[str, Any]) -> tuple[Stability, str | None, datetime.date | None]:
        stability = Stability.STABLE
        raw = table.get("stability", "stable")
        try:
            stability = Stability(raw)
        except ValueError:
            self.problem(f"must be one of experimental, beta, stable, deprecated (found {raw!r})", "stability")
        deprecated_by = table.get("deprecated_by")
        if deprecated_by is not None and (not isinstance(deprecated_by, str) or not deprecated_by):
            self.problem("must be a capability id, name or OSSA URI", "deprecated_by")
            deprecated_by = None
        sunset = table.get("sunset_date")
        date: datetime.date | None = None
        if isinstance(sunset, datetime.datetime):
            date = sunset.date()
        elif isinstance(sunset, datetime.date):
            date = sunset
        elif isinstance(sunset, str):
            try:
                date = datetime.date.fromisoformat(sunset)
            except ValueError:
                self.problem(f"must be an ISO 8601 date (YYYY-MM-DD), found {sunset!r}", "sunset_date")
        elif sunset is not None:
            self.problem("must be an ISO 8601 date", "sunset_date")
        if (deprecated_by or date) and stability is not Stability.DEPRECATED:
            # Located where it is fixed: the stability line when there is
            # one, else the key that needs it (not the [[capability]] header).
            given = [k for k in ("deprecated_by", "sunset_date") if table.get(k) is not None]
            key = "stability" if "stability" in table else given[0]
            self.problem(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} stability = \"deprecated\" "
                         f"(found {stability.value!r}{'' if 'stability' in table else ', the default'})", key)
        return stability, deprecated_by, date

    def _aliases(self, table: Mapping[str, Any], name: str | None) -> list[str]:
        raw = table.get("aliases", [])
        aliases = string_list(raw)
        if aliases is None or any(not a or any(c.isspace() for c in a) for a in aliases):
            self.problem("must be a list of non-empty strings without spaces", "aliases")
            return []
        if name is not None and name in aliases:
            self.problem(f"alias {name!r} is the capability's own name", "aliases")
        if len(set(aliases)) != len(aliases):
            self.problem("lists an alias twice", "aliases")
        return aliases

    def _schema(self, table: Mapping[str, Any], which: str, name: str | None,
                version: Version | None) -> tuple[SchemaRef, Any, str] | None:
        if which not in table:
            self.problem("missing (an inline table or a path to a JSON file)", which)
            return None
        raw = table[which]
        if isinstance(raw, (dict, bool)):
            try:
                data = canonical_json(raw)
            except (TypeError, ValueError) as exc:
                self.problem(f"inline schema is not plain JSON: {exc}", which)
                return None
            doc, source = raw, "inline"
        elif isinstance(raw, str):
            read = self._read_schema_file(raw, which)
            if read is None:
                return None
            data = read
            try:
                doc = json_loads(data)
            except (ValueError, UnicodeDecodeError) as exc:
                self.problem(f"{raw}: not valid JSON: {exc}", which)
                return None
            source = raw
        else:
            self.problem("must be an inline table or a path string", which)
            return None
        try:
            compile_schema(doc, what=which.replace("_", " "))
        except AmpError as exc:
            self.problem(exc.message, which)
            return None
        if name is None or version is None:
            return None
        key = f"{name}/{version}/{which.split('_')[0]}"
        self.artifacts[key] = data
        ref = SchemaRef(bundle_id=self.bundle_id, artifact_key=key, hash_alg="sha-256",
                        hash=hashlib.sha256(data).digest())
        return ref, doc, source

    def _read_schema_file(self, rel: str, which: str) -> bytes | None:
        if self.files is None:
            self.problem("schema files need a manifest file to be relative to", which)
            return None
        if "\x00" in rel:  # the OS cannot even be asked (ValueError, not OSError)
            self.problem(f"schema file name {rel!r} contains a NUL character", which)
            return None
        try:
            data = self.files.read(self.files.base_dir / rel, MAX_SCHEMA_BYTES)
        except OSError as exc:
            self.problem(f"cannot read schema file {rel!r}: {exc.strerror or exc}", which)
            return None
        if len(data) > MAX_SCHEMA_BYTES:
            self.problem(f"schema file {rel!r} is larger than {MAX_SCHEMA_BYTES} bytes", which)
            return None
        return data


@dataclass(frozen=True, slots=True)
class _Declared:
    """A capability's identity and aliases, read even when the rest of its
    table has problems."""

    index: int
    id: str
    name: str
    aliases: tuple[str, ...]


def _cross_checks(out: Collector, declared: list[_Declared]) -> None:
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
        out.add("unknown top-level key (expected bundle_id, python_path, [[capability]] and [mcp_server.NAME] "
                "tables)", key=key)
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
    reader = _CapabilityReader(out, files, bundle_id, artifacts, check_bindings, search_path, servers)
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
                    mcp_servers=MappingProxyType(servers)), []


def manifest_from_data(data: Mapping[str, Any], *, source: str = "<data>", files: ManifestFiles | None = None,
                       check_bindings: bool = False) -> Manifest:
    """Build a manifest from already-parsed TOML-shaped data (the demo set,
    the Python API), or raise :class:`ManifestError` (4001) listing every
    problem."""
    manifest, problems = manifest_problems(dict(data), source=source, files=files, check_bindings=check_bindings)
    if manifest is None:
        raise ManifestError(problems)
    return manifest
