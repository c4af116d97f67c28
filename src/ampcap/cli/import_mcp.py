"""``ampcap caps import-mcp``: a manifest for every tool of an MCP server,
and ``serve --mcp NAME=COMMAND``, which serves the same without a file.

Both start (or connect to) the server once, list its tools and build the
manifest with :func:`ampcap.mcp.sdk.tools_manifest`; import-mcp prints it
as TOML (written here: tomllib only reads), serve loads it as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any

from .errors import CommandError, UsageError

if TYPE_CHECKING:
    from ..caps.manifest import Manifest

__all__ = ["add_parser", "mcp_manifest", "to_toml"]

_DESCRIPTION = """\
Start the MCP server (--command, over stdio) or connect to it (--url,
streamable HTTP), list its tools and print a manifest that offers each as
an AMP capability: the name mcp.NAME.TOOL at version 1.0.0 with the alias
mcp:NAME/TOOL@1.0, the tool's inputSchema and outputSchema as the
capability's schemas (anything, {}, when it declares no output schema) and
its description as notes. Save it and serve it:

  ampcap caps import-mcp --name fs --command npx -y @modelcontextprotocol/server-filesystem /tmp > fs.toml
  ampcap serve --manifest fs.toml

Choose what to offer: --include and --exclude take glob patterns matched
against the tool's name and the capability's (repeatable; exclude wins);
--read-only keeps only the tools that declare MCP's readOnlyHint. The tools'
MCP annotations (title, readOnlyHint, destructiveHint, idempotentHint,
openWorldHint) are kept as each capability's annotations, and a tool that
may be destructive (not declared read-only, destructiveHint not false) is
marked with a comment in the output.

--command takes the rest of the command line, so give --name before it.
Needs the MCP SDK (pip install 'ampcap[mcp]'). Format: docs/bindings.md.

Exit status: 0 when the manifest was printed; 1 when the server cannot be
started or reached (the reason on stderr); 2 for a usage error."""

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("import-mcp", help="print a manifest offering every tool of an MCP server",
                       description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                       usage="%(prog)s [-h] --name NAME [--timeout S] [--include GLOB] [--exclude GLOB] [--read-only] "
                             "(--url URL | --command ARGV...)")
    p.add_argument("--name", metavar="NAME", help="the server's name in the manifest ([mcp_server.NAME]) and in "
                                                  "capability names (letters, digits, '_', '-')")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="seconds to wait for the server to start and answer (default 20)")
    add_selection_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", metavar="URL", help="a streamable HTTP MCP endpoint (http(s)://…/mcp)")
    source.add_argument("--command", nargs=argparse.REMAINDER, metavar="ARGV",
                        help="the command that runs the server over stdio (the rest of the line)")
    p.set_defaults(func=cmd_import_mcp)


def add_selection_arguments(p: Any, prefix: str = "") -> None:
    """--include, --exclude, --read-only (``serve`` spells them --mcp-include, …)."""
    p.add_argument(f"--{prefix}include", action="append", default=[], metavar="GLOB",
                   help="offer only tools whose name (or capability name) matches GLOB (repeatable)")
    p.add_argument(f"--{prefix}exclude", action="append", default=[], metavar="GLOB",
                   help="leave out tools whose name (or capability name) matches GLOB (repeatable; wins over "
                        "include)")
    p.add_argument(f"--{prefix}read-only", action="store_true",
                   help="offer only the tools that declare MCP's readOnlyHint (no destructive ones)")


def _server_table(command: list[str] | None, url: str | None, cwd: str | None) -> dict[str, Any]:
    if url is not None:
        return {"url": url}
    return {"command": list(command or []), **({"cwd": cwd} if cwd is not None else {})}


def mcp_manifest(name: str, command: list[str] | None, url: str | None, *, timeout_s: float = 20.0,
                 cwd: str | None = None, include: list[str] | None = None, exclude: list[str] | None = None,
                 read_only: bool = False) -> dict[str, Any]:
    """The manifest data offering every tool of the server (see module);
    ``cwd``, when given, is where the server runs (import-mcp writes the
    directory it ran in, so relative paths in the command keep working
    wherever the manifest is saved)."""
    import trio

    from ..caps.binding.tables import read_mcp_servers
    from ..mcp.client import list_server_tools
    from ..mcp.sdk import require, tools_manifest

    table = _server_table(command, url, cwd)
    problems: list[str] = []
    servers = read_mcp_servers({name: table}, lambda message, key: problems.append(f"{key}: {message}"), None, None)
    if problems:
        raise UsageError(problems[0])
    require()
    tools = trio.run(lambda: list_server_tools(servers[name], connect_timeout_s=timeout_s))
    if not tools:
        raise CommandError(f"MCP server {name} offers no tools")
    data = tools_manifest(name, table, tools, include=include or (), exclude=exclude or (), read_only=read_only)
    if not data["capability"]:
        raise CommandError(f"MCP server {name}: none of its {len(tools)} tools ({', '.join(t.name for t in tools)}) "
                           "passes --include/--exclude/--read-only")
    return data


def cmd_import_mcp(args: argparse.Namespace) -> int:
    command = args.command
    if command is not None and args.name is None and len(command) >= 2 and command[-2] == "--name":
        # `--command ARGV... --name NAME`, as the issue wrote it: the name is the last two words.
        args.name, command = command[-1], command[:-2]
    if args.name is None:
        raise UsageError("--name NAME is required (give it before --command)")
    if command is not None and not command:
        raise UsageError("--command needs the server's command line")
    if not args.timeout > 0:
        raise UsageError("--timeout must be positive")
    data = mcp_manifest(args.name, command, args.url, timeout_s=args.timeout,
                        cwd=os.getcwd() if command is not None else None, include=args.include,
                        exclude=args.exclude, read_only=args.read_only)
    source = " ".join(shlex.quote(a) for a in (["--url", args.url] if args.url else ["--command", *(command or [])]))
    sys.stdout.write(f"# The tools of MCP server {args.name} as AMP capabilities (docs/bindings.md).\n"
                     f"# Made by: ampcap caps import-mcp --name {shlex.quote(args.name)} {source}\n"
                     f"# Serve with: ampcap serve --manifest FILE\n\n")
    sys.stdout.write(to_toml(data))
    return 0


def serve_mcp_manifests(values: list[str], *, include: list[str] | None = None, exclude: list[str] | None = None,
                        read_only: bool = False) -> list[Manifest]:
    """``serve --mcp NAME=COMMAND`` (or ``NAME=URL``): a manifest per server,
    with the tools ``--mcp-include``/``--mcp-exclude``/``--mcp-read-only`` keep."""
    chosen = {"include": include, "exclude": exclude, "read_only": read_only}
    from ..caps.manifest import manifest_from_data

    manifests = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest.strip():
            raise UsageError(f"--mcp takes NAME=COMMAND or NAME=URL, not {value!r}")
        if rest.startswith(("http://", "https://")):
            data = mcp_manifest(name, None, rest, **chosen)  # type: ignore[arg-type]
        else:
            try:
                argv = shlex.split(rest)
            except ValueError as exc:
                raise UsageError(f"--mcp {name}: {exc}") from None
            data = mcp_manifest(name, argv, None, **chosen)  # type: ignore[arg-type]
        manifests.append(manifest_from_data(data, source=f"--mcp {name}"))
    return manifests


# ------------------------------------------------------------- TOML output

def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    # JSON's string escapes are TOML's, except that TOML wants DEL escaped too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = [f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def to_toml(data: dict[str, Any]) -> str:
    """The manifest data :func:`ampcap.mcp.sdk.tools_manifest` builds, as
    TOML. Schemas are inline tables (one line each: TOML 1.0 inline tables
    cannot span lines); JSON nulls, which TOML cannot hold, are left out."""
    lines = [f"bundle_id = {_string(data['bundle_id'])}", ""]
    for name, table in data["mcp_server"].items():
        lines.append(f"[mcp_server.{_key(name)}]")
        lines += [f"{_key(k)} = {_value(v)}" for k, v in table.items()]
        lines.append("")
    for cap in data["capability"]:
        hints = cap.get("annotations", {})
        if hints.get("readOnlyHint") is not True and hints.get("destructiveHint", True) is not False:
            lines.append("# DESTRUCTIVE: the tool is not declared read-only and may change or delete things "
                         "(leave it out with --exclude or --read-only)")
        lines.append("[[capability]]")
        binding = cap["binding"]
        lines += [f"{_key(k)} = {_value(v)}" for k, v in cap.items() if k != "binding" and v is not None]
        for kind, table in binding.items():
            lines.append(f"\n[capability.binding.{kind}]")
            lines += [f"{_key(k)} = {_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)
