"""One ``[[capability]]`` table of a manifest, read into a
:class:`CapabilitySpec`: its identity (``id``, or ``name`` + ``version``, or
an OSSA URI), policy and ranges (RFC 004 §8), stability and deprecation,
aliases, the two schemas (inline, or a file through the injected
:class:`ManifestFiles`, kept as the bundle's artifacts), the bridge adapter,
and its binding (:mod:`ampcap.caps.binding.section`).

Every problem goes to the manifest's :class:`Collector`, located by the
capability's index and the key that holds it; the checks across
capabilities and the file as a whole stay with the loader
(:mod:`ampcap.caps.manifest`), which this module was split out of.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..decoders import json_loads
from ..errors import AmpError
from .binding.section import BindingSection
from .binding.local import resolve_callable
from .descriptor import Descriptor, SchemaRef, Stability
from .manifest_errors import Collector
from .manifest_model import CapabilitySpec, ManifestFiles, Policy, canonical_json, string_list
from .names import URI_SCHEMES, parse_ossa_uri
from .params import compile_schema
from .binding.other_protocols import McpServer
from .semver import Range, Version

__all__ = ["CapabilityReader", "Declared", "MAX_SCHEMA_BYTES"]

MAX_SCHEMA_BYTES = 1 << 20
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9][A-Za-z0-9_-]*)+$")
_CAP_KEYS = frozenset({
    "id", "name", "version", "aliases", "notes", "stability", "deprecated_by", "sunset_date",
    "policy", "supported_ranges", "deprecated_ranges", "input_schema", "output_schema", "binding", "bridge",
    "binding_order",
    "idempotent", "annotations", "price",
})
# RFC 007 §4.2 money, as a price (the payment core checks it again when quoting).
_ASSET_RE, _NETWORK_RE = re.compile(r"[A-Z0-9._-]{1,32}"), re.compile(r"[a-z0-9._-]{1,64}")
PAYMENT_PARAM = "$payment"  # the params key a priced capability's caller names its payment in
# MCP's tool annotations (hints about a tool's behaviour), kept on the
# descriptor as the extension key "annotations" with MCP's own spelling, so
# that a tool imported from MCP goes back out of the gateway with them.
ANNOTATION_KEYS = {"title": str, "readOnlyHint": bool, "destructiveHint": bool, "idempotentHint": bool,
                   "openWorldHint": bool}


class CapabilityReader:
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
        self.declared: list[Declared] = []

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
            self.declared.append(Declared(index, f"{name}:{version}", name, tuple(aliases)))
        notes = table.get("notes")
        if notes is not None and not isinstance(notes, str):
            self.problem("must be a string", "notes")
        idempotent = table.get("idempotent", False)
        if not isinstance(idempotent, bool):
            self.problem("must be true or false", "idempotent")
        annotations = self._annotations(table.get("annotations"))
        price = self._price(table.get("price"))
        schemas = {}
        for which in ("input_schema", "output_schema"):
            schemas[which] = self._schema(table, which, name, version, priced=price is not None)
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
                extensions={"annotations": annotations} if annotations else {},
            )
        except AmpError as exc:
            self.problem(exc.message, exc.path)
            return None
        return CapabilitySpec(descriptor=descriptor, policy=policy, binding=binding,
                              input_schema=in_doc, output_schema=out_doc,
                              input_source=in_src, output_source=out_src, bridge=bridge,
                              bridge_result=bridge_result, idempotent=idempotent is True, price=price)

    def _price(self, raw: Any) -> tuple[int, str, str] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or set(raw) != {"amount_minor", "asset", "network"}:
            self.problem("must be { amount_minor = N, asset = \"USD\", network = \"ampcap-local-ledger\" }", "price")
            return None
        amount, asset, network = raw["amount_minor"], raw["asset"], raw["network"]
        if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount < 1 << 63:
            self.problem("amount_minor must be a whole number of minor units, 1 or more", "price.amount_minor")
            return None
        if not isinstance(asset, str) or not _ASSET_RE.fullmatch(asset):
            self.problem("asset must be an upper-case code ([A-Z0-9._-], at most 32)", "price.asset")
            return None
        if not isinstance(network, str) or not _NETWORK_RE.fullmatch(network):
            self.problem("network must be [a-z0-9._-], at most 64", "price.network")
            return None
        return amount, asset, network

    def _annotations(self, raw: Any) -> dict[str, Any]:
        """``annotations = { readOnlyHint = true, title = "…" }``: MCP's tool hints."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem("must be a table of MCP tool hints (title, readOnlyHint, destructiveHint, "
                         "idempotentHint, openWorldHint)", "annotations")
            return {}
        out: dict[str, Any] = {}
        for key, value in raw.items():
            kind = ANNOTATION_KEYS.get(key)
            if kind is None:
                self.problem(f"unknown hint (expected one of: {', '.join(ANNOTATION_KEYS)})", f"annotations.{key}")
            elif not isinstance(value, kind):
                self.problem("must be a string" if kind is str else "must be true or false", f"annotations.{key}")
            else:
                out[key] = value
        return out

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
                version: Version | None, priced: bool = False) -> tuple[SchemaRef, Any, str] | None:
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
        if priced and which == "input_schema":
            # The published schema says what a call needs: the payment's id too.
            if not (isinstance(doc, dict) and doc.get("type") == "object"):
                self.problem('a priced capability needs an object schema (type = "object") to add "$payment" to',
                             which)
                return None
            doc = {**doc, "properties": {**doc.get("properties", {}), PAYMENT_PARAM: {
                       "description": "payment_id of a captured payment for this call (RFC 007)"}},
                   "required": [*doc.get("required", []), PAYMENT_PARAM]}
            data = canonical_json(doc)
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
class Declared:
    """A capability's identity and aliases, read even when the rest of its
    table has problems."""

    index: int
    id: str
    name: str
    aliases: tuple[str, ...]

