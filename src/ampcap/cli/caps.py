"""``ampcap caps validate|list|show``: inspect a capability manifest.

``validate`` prints one OK line (exit 0) or every problem with file,
capability, key and line (exit 1). ``list`` prints an aligned table,
``show`` one capability in full; both take ``--json``. ``--demo`` in place
of a manifest path uses the built-in demo set of ``serve --demo``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ..display import counted
from .errors import local_file_error

if TYPE_CHECKING:  # the manifest machinery (jsonschema…) loads only when a command runs
    from ..caps.manifest import CapabilitySpec, Manifest

__all__ = ["register"]


_READS = """\
A manifest is a TOML file listing [[capability]] tables (format:
docs/manifest.md); schema files it names are read relative to it. --demo
instead of MANIFEST uses the built-in demo set that 'serve --demo' offers."""

_CAPS = f"""\
Check, list and show the capabilities a manifest declares, as 'ampcap serve
--manifest' would serve them, without starting a daemon.

{_READS}

Exit status: 0 on success; 1 when the manifest has problems or cannot be
read (validate lists them all on stdout, list and show on stderr), or when
show finds no such capability; 2 for a usage error (no ACTION, a missing or
extra operand)."""

_VALIDATE = f"""\
Check a manifest as 'ampcap serve --manifest' would load it: its syntax,
every capability's keys, versions and ranges, its schemas (read and
compiled), its bindings (Python ones imported, command ones looked up on
PATH, MCP servers started or connected to and their tools listed, unless
--no-connect) and the checks across capabilities (duplicate ids, clashing
aliases).
Prints 'OK …' with the counts, or every problem on stdout, one per line as
FILE:LINE: capability[N] (ID): key 'KEY': what is wrong, then their number.

{_READS}

Exit status: 0 when the manifest is valid, 1 when it has problems or cannot
be read, 2 for a usage error."""

_LIST = f"""\
Print a table of the capabilities a manifest declares: id, aliases,
compatibility policy, stability and binding kind (--json: an array of
objects that also carry supported ranges, deprecation and the binding's
target). Bindings are not imported or looked up: 'caps validate' does that.

{_READS}

Exit status: 0 when listed, 1 when the manifest has problems (printed on
stderr) or cannot be read, 2 for a usage error."""

_SHOW = f"""\
Print everything about one capability: id, name, version, aliases, policy
and ranges, stability and deprecation, binding, notes, both schema
references with their hashes, and the input schema itself. ID|NAME is a full
id (name:version), a name or an alias; every version it matches is shown,
newest first (--json: one object, or an array when several match).

{_READS}

Exit status: 0 when shown, 1 when no capability matches or the manifest has
problems or cannot be read, 2 for a usage error."""


def register(subparsers: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = subparsers.add_parser("caps", help="validate, list and show capability manifests",
                                   description=_CAPS, formatter_class=raw)
    sub = parser.add_subparsers(dest="caps_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    def source(p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument("manifest", nargs="?", metavar="MANIFEST", help="TOML manifest file")
        group.add_argument("--demo", action="store_true", help="use the built-in demo capabilities")

    from .caps_bundle import add_parser as add_bundle
    from .import_mcp import add_parser as add_import_mcp

    add_import_mcp(sub)
    add_bundle(sub)

    p = sub.add_parser("validate", help="check a manifest and report every problem", description=_VALIDATE,
                       formatter_class=raw)
    source(p)
    p.add_argument("--no-connect", action="store_true",
                   help="do not start or connect to the manifest's MCP servers to check their tools")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("list", help="table of the capabilities a manifest declares", description=_LIST,
                       formatter_class=raw)
    source(p)
    p.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one capability in full", description=_SHOW, formatter_class=raw,
                       usage="%(prog)s [-h] [--json] (MANIFEST | --demo) ID|NAME")
    # Two positionals with an optional first one: argparse cannot express
    # that, so both are collected and sorted out in cmd_show.
    p.add_argument("operands", nargs="+", metavar="MANIFEST ID|NAME",
                   help="manifest file (omit with --demo), then a capability id, name or alias")
    p.add_argument("--demo", action="store_true", help="use the built-in demo capabilities")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=cmd_show)


def _load(args: argparse.Namespace, *, check_bindings: bool = False) -> Manifest:
    from ..caps.manifest import ManifestError
    from ..files.manifest import check_manifest

    if args.demo:
        from ..caps.demo import demo_manifest

        return demo_manifest()
    manifest, problems = check_manifest(args.manifest, check_bindings=check_bindings)
    if manifest is None:
        raise local_file_error(ManifestError(problems))
    return manifest


def cmd_validate(args: argparse.Namespace) -> int:
    from ..files.manifest import check_manifest

    manifest: Manifest | None
    if args.demo:
        manifest = _load(args, check_bindings=True)
    else:
        manifest, problems = check_manifest(args.manifest, check_bindings=True)
        if manifest is None:
            for problem in problems:
                print(problem, file=sys.stdout)
            print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} found", file=sys.stdout)
            return 1
    if manifest.mcp_servers and not args.no_connect:
        found = _probe_mcp_servers(manifest)
        if found:
            for line in found:
                print(line, file=sys.stdout)
            print(f"{len(found)} problem{'s' if len(found) != 1 else ''} found", file=sys.stdout)
            return 1
    names = {c.name for c in manifest.capabilities}
    servers = f", {counted(len(manifest.mcp_servers), 'MCP server')}" if manifest.mcp_servers else ""
    print(f"OK {manifest.source}: {counted(len(manifest.capabilities), 'capability', 'capabilities')}, "
          f"{counted(len(names), 'name')}, "
          f"bundle {manifest.bundle.bundle_id}{servers}")
    return 0


def _probe_mcp_servers(manifest: Manifest) -> list[str]:
    """Start (or connect to) each MCP server once, as serve would, and check
    that the tools the bindings name are there: serve would keep going
    without them (logging, retrying, falling back), validate says so."""
    import trio

    from ..bindings import servers_of
    from ..caps.manifest import ManifestProblem
    from ..caps.binding.other_protocols import Fallback, McpBinding
    from ..errors import AmpError
    from ..mcp.client import list_server_tools
    from ..mcp.sdk import require

    try:
        text = open(manifest.source, encoding="utf-8").read().splitlines()  # noqa: SIM115 - read whole
    except OSError:
        text = []

    def line_of(name: str) -> int | None:
        return next((i + 1 for i, line in enumerate(text) if line.strip().replace(" ", "") == f"[mcp_server.{name}]"),
                    None)

    wanted: dict[str, set[str]] = {}
    for spec in manifest.capabilities:
        for one in spec.binding.bindings if isinstance(spec.binding, Fallback) else (spec.binding,):
            if isinstance(one, McpBinding):
                wanted.setdefault(one.server.name, set()).add(one.tool)
    problems: list[ManifestProblem] = []
    try:
        require()
    except AmpError as exc:
        return [str(ManifestProblem(manifest.source, exc.message))]

    async def probe(server: Any) -> None:
        key = f"mcp_server.{server.name}"
        try:
            tools = {t.name for t in await list_server_tools(server)}
        except AmpError as exc:
            problems.append(ManifestProblem(manifest.source, exc.message, key=key, line=line_of(server.name)))
            return
        for tool in sorted(wanted.get(server.name, set()) - tools):
            problems.append(ManifestProblem(manifest.source, f"server {server.name} has no tool {tool!r} (it has: "
                                            f"{', '.join(sorted(tools)) or 'none'})", key=key,
                                            line=line_of(server.name)))

    async def probe_all() -> None:
        async with trio.open_nursery() as nursery:
            for server in servers_of(spec.binding for spec in manifest.capabilities):
                nursery.start_soon(probe, server)

    trio.run(probe_all)
    return [str(p) for p in sorted(problems, key=lambda p: p.line or 0)]


def _row(spec: CapabilitySpec) -> dict[str, Any]:
    d = spec.descriptor
    return {
        "id": spec.id,
        "aliases": list(spec.aliases),
        "policy": spec.policy.value,
        "supported_ranges": [str(r) for r in d.supported_ranges or ()],
        "stability": d.stability.value,
        "deprecated_by": d.deprecated_by,
        "sunset_date": d.sunset_date.isoformat() if d.sunset_date else None,
        # Several bindings (R17 fallback): "mcp,http", tried in that order.
        "binding": ",".join(_kinds(spec)),
        "target": spec.binding.describe(),
        "bindings": [{"kind": b.kind, "target": b.describe()} for b in _each(spec)],
    }


def _each(spec: CapabilitySpec) -> tuple[Any, ...]:
    from ..caps.binding.other_protocols import Fallback

    return spec.binding.bindings if isinstance(spec.binding, Fallback) else (spec.binding,)


def _kinds(spec: CapabilitySpec) -> list[str]:
    return [b.kind for b in _each(spec)]


def cmd_list(args: argparse.Namespace) -> int:
    manifest = _load(args)
    rows = [_row(c) for c in manifest.capabilities]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("ID", "ALIASES", "POLICY", "STABILITY", "BINDING")
    table = [header] + [
        (r["id"], ",".join(r["aliases"]) or "-", r["policy"], r["stability"], r["binding"]) for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _signature(spec: CapabilitySpec, manifest: Manifest) -> str:
    """The descriptor's RFC 004 §5.2 verdict, as a client requiring a
    signature from the manifest's signer would reach it."""
    from ..caps.descriptor_trust import DescriptorChecker, DescriptorTrust
    from ..errors import AmpError

    if spec.descriptor.descriptor_sig is None:
        if manifest.descriptor_signer is not None:
            return "signed by the daemon's identity when served (descriptor_signer = \"identity\")"
        return "unsigned"
    signer = manifest.signed_by or "?"
    trust = DescriptorTrust(require_all=True, owners={spec.name: (signer,)})
    try:
        DescriptorChecker(trust, artifacts=manifest.schema_store()).check(spec.descriptor)
    except AmpError as exc:
        return f"refused ({exc.code}): {exc.message}"
    return f"signed by {signer}, verifies"


def _detail(spec: CapabilitySpec, manifest: Manifest | None = None) -> dict[str, Any]:
    d = spec.descriptor
    out = _row(spec)
    if manifest is not None:
        out["signature"] = _signature(spec, manifest)
    out.update(
        name=d.name,
        version=str(d.version),
        notes=d.notes,
        deprecated_ranges=[str(r) for r in d.deprecated_ranges or ()],
        input_schema={"source": spec.input_source, "bundle_id": d.input_schema.bundle_id,
                      "artifact_key": d.input_schema.artifact_key, "hash_alg": d.input_schema.hash_alg,
                      "hash": d.input_schema.hash.hex(), "schema": spec.input_schema},
        output_schema={"source": spec.output_source, "bundle_id": d.output_schema.bundle_id,
                       "artifact_key": d.output_schema.artifact_key, "hash_alg": d.output_schema.hash_alg,
                       "hash": d.output_schema.hash.hex()},
    )
    return out


def cmd_show(args: argparse.Namespace) -> int:
    expected = 1 if args.demo else 2
    if len(args.operands) != expected:
        usage = "ampcap caps show --demo ID|NAME" if args.demo else "ampcap caps show MANIFEST ID|NAME"
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    args.manifest = None if args.demo else args.operands[0]
    args.capability = args.operands[-1]
    manifest = _load(args)
    if manifest.descriptor_signer is not None:
        from ..files.manifest import sign_descriptors
        from .errors import local_file_errors

        with local_file_errors():
            manifest = sign_descriptors(manifest)
    specs = manifest.find(args.capability)
    if not specs:
        print(f"ampcap caps show: no capability {args.capability!r} in {manifest.source}", file=sys.stderr)
        return 1
    details = [_detail(s, manifest) for s in specs]
    if args.json:
        print(json.dumps(details if len(details) > 1 else details[0], indent=2))
        return 0
    for i, info in enumerate(details):
        if i:
            print()
        _print_detail(info)
    return 0


def _print_detail(info: dict[str, Any]) -> None:
    lines = [
        ("id", info["id"]),
        ("name", info["name"]),
        ("version", info["version"]),
        ("aliases", ", ".join(info["aliases"]) or "-"),
        ("policy", info["policy"]),
        ("supported_ranges", ", ".join(info["supported_ranges"]) or "(exact version only)"),
        ("deprecated_ranges", ", ".join(info["deprecated_ranges"]) or "-"),
        ("stability", info["stability"]),
        ("deprecated_by", info["deprecated_by"] or "-"),
        ("sunset_date", info["sunset_date"] or "-"),
        *(("binding", f"{b['kind']}: {b['target']}") for b in info["bindings"]),
        ("notes", info["notes"] or "-"),
        *((("signature", info["signature"]),) if "signature" in info else ()),
    ]
    for which in ("input_schema", "output_schema"):
        ref = info[which]
        lines.append((which, f"{ref['hash_alg']}:{ref['hash']}  ({ref['bundle_id']} / {ref['artifact_key']}, "
                             f"from {ref['source']})"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key.ljust(width)}  {value}")
    print("input schema:")
    for line in json.dumps(info["input_schema"]["schema"], indent=2, sort_keys=True).splitlines():
        print(f"  {line}")
