"""``ampcap mcp``: AMP peers' capabilities as MCP tools (the MCP gateway).

MCP over stdio by default, so an MCP host can launch the gateway as a
command; ``--http HOST:PORT`` serves MCP streamable HTTP instead (the
endpoint URL is printed on stdout). Dialling takes the options of
``ampcap invoke``. The MCP SDK is imported only when the command runs.
See docs/mcp-gateway.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..display import counted
from ..files.identity import default_caller_path
from ..peer.config import RELAY_DID
from .argtypes import seconds, did
from ..errors import AmpError
from .errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CommandError, UsageError, local_file_errors
from .tls_options import add_tls_client_arguments, tls_client_context

__all__ = ["register", "run_mcp"]

_HELP = """\
Serve the capabilities of one or more AMP peers as MCP tools: one tool per
capability name (the newest version, or the newest inside --range), called
with CAP_INVOKE. Every AMP failure is a tool error whose text starts with its
code and name ("4004 SCHEMA_VIOLATION: ..."). Lost peers are redialled;
while one is down its tools answer 5002 at once. The peers are listed again
every --poll seconds and whenever one sends CAP_DECLARE unasked, and the host
is told (notifications/tools/list_changed) when the tools change.

Register it with an MCP host as a stdio server; --print-config prints the
block for this command line with absolute paths (the ampcap executable, the
identity file), ready to paste:
  {"mcpServers": {"ampcap": {"command": "ampcap", "args": ["mcp", "amp://127.0.0.1:7700"]}}}
The gateway signs with the callers' default key (caller.json beside the
daemon's identity.json), so it never shares a local daemon's DID. When it
cannot serve on stdio, the host is told why: every tools/list and tools/call
answers an MCP error carrying the reason (hosts hide stderr).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("mcp", help="MCP gateway: serve AMP peers' capabilities as MCP tools",
                              description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("urls", nargs="+", metavar="URL", help="a peer to serve, e.g. amp://127.0.0.1:7700 (or amps://, https://, wss://; several: "
                                                         "the tools of all; clashing names get .peerN)")
    p.add_argument("--identity", type=Path, default=None, metavar="FILE",
                   help=f"identity key file (default {default_caller_path()}, the callers' own, apart from "
                        "the daemon's; created if missing)")
    p.add_argument("--peer-did", action="append", default=[], metavar="DID", type=did,
                   help="refuse a peer unless it proves this DID (once per URL, in order)")
    add_tls_client_arguments(p, "the peers")
    p.add_argument("--to", default=None, metavar="DID", type=did,
                   help="URL is a relay (like the public Rust example's): address this agent through it")
    p.add_argument("--relay-did", default=RELAY_DID, metavar="DID", type=did,
                   help=f"with --to: the relay's own DID (default {RELAY_DID})")
    p.add_argument("--compat", choices=("rust-example",), default=None,
                   help="talk like the public Rust example (raw framing + its Sig_Input variant)")
    p.add_argument("--range", action="append", default=[], metavar="NAME=RANGE",
                   help="offer the newest version of NAME inside RANGE, e.g. "
                        "'org.ampcap.demo.echo=>=1.0.0 <2.0.0' (repeatable)")
    p.add_argument("--capability", action="append", default=[], metavar="NAME",
                   help="list only these capability names (repeatable; default: every capability, through "
                        "ampcap's '*' listing, asked only of peers that announced it in HELLO (ampcap.list-all): "
                        "a peer that did not, or one reached through a relay (--to), has no tools unless its "
                        "names are given here, and the log says so)")
    p.add_argument("--bundle", action="append", default=[], type=Path, metavar="PATH",
                   help="a schema bundle (directory, .zip, .tar.gz) holding the peers' schemas (repeatable; "
                        "ampcap's demo bundle is built in); tools without a local schema accept any object")
    p.add_argument("--tool-names", choices=("plain", "dotted"), default="plain",
                   help="plain (default): tool names match ^[A-Za-z0-9_-]{1,64}$, as LLM tool APIs require "
                        "(dots become _); dotted: keep the capability's dots (MCP allows them)")
    p.add_argument("--underscore-names", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="offer only capabilities whose name matches GLOB (fnmatch, e.g. 'mcp.git.*'; repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="never offer capabilities whose name matches GLOB (repeatable; wins over --include)")
    p.add_argument("--print-config", action="store_true",
                   help="print the MCP host configuration (JSON, absolute paths) for this command line and exit")
    p.add_argument("--http", default=None, metavar="HOST:PORT",
                   help="serve MCP streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any)")
    p.add_argument("--poll", type=seconds(), default=30.0, metavar="S",
                   help="list the peers' capabilities again every S seconds (default 30)")
    p.add_argument("--timeout", type=seconds(unlimited=True), default=60.0, metavar="S",
                   help="seconds a tool call waits for its AMP answer (default 60; 'inf': as long as the peer "
                        "allows)")
    p.set_defaults(func=run_mcp)


def _ranges(items: list[str]) -> dict[str, Any]:
    from ..caps.semver import Range
    from ..errors import AmpError

    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name or not text:
            raise UsageError(f"--range takes NAME=RANGE, e.g. 'org.x.y=>=1.0.0 <2.0.0', got {item!r}")
        try:
            out[name] = Range.parse(text)
        except AmpError as exc:
            raise UsageError(f"--range {name}: {exc.message}") from None
    return out


def run_mcp(args: argparse.Namespace) -> int:
    if args.print_config:
        return _print_config(args)
    try:
        return _run(args)
    except (UsageError, CommandError, AmpError) as exc:
        if args.http is not None or args.print_config or not _host_is_waiting():
            raise
        reason = str(exc) if not isinstance(exc, AmpError) else f"error {exc}"
        return _tell_the_host(reason, EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILURE)


HOST_GRACE_S = 3.0  # how long a failed gateway waits for a host's first message


def _host_is_waiting() -> bool:
    """stdin and stdout are pipes: an MCP host started us, and reads only MCP."""
    import os
    import stat

    def pipe(fd: int) -> bool:
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return False
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)

    return pipe(0) and pipe(1)


def _tell_the_host(reason: str, status: int) -> int:
    """The reason on stderr, and in every MCP answer until the host hangs up."""
    import sys

    import trio

    print(f"ampcap mcp: {reason}", file=sys.stderr, flush=True)
    # A host sends `initialize` as soon as it has started us; a script whose
    # stdin merely happens to be a pipe sends nothing, and must not be kept
    # waiting: without input soon, this is not a host.
    import select

    if not select.select([0], [], [], HOST_GRACE_S)[0]:
        return status
    try:
        from ..mcp.gateway_unavailable import serve_failure_stdio
    except ImportError:  # no SDK: nothing can speak MCP
        return status
    trio.run(serve_failure_stdio, reason)
    return status


def _run(args: argparse.Namespace) -> int:
    from ..net.transport.url import UrlError, parse_endpoints, parse_hostport

    for url in args.urls:
        try:
            endpoints = parse_endpoints(url)  # one URL, or several endpoints of one peer (RFC 002 §3.5)
        except UrlError as exc:
            raise UsageError(str(exc)) from None
        if args.compat and any(e.binding != "amps" for e in endpoints):
            raise UsageError("--compat rust-example speaks raw TCP framing: give amp:// or amps:// URLs")
    if args.peer_did and len(args.peer_did) != len(args.urls):
        raise UsageError(f"--peer-did is given {counted(len(args.peer_did), 'time')} for "
                         f"{counted(len(args.urls), 'URL')}: give it "
                         "once per URL, in the same order, or not at all")
    if args.to is not None and len(args.urls) != 1:
        raise UsageError("--to addresses one agent through one relay URL: give exactly one URL with it")
    if args.compat == "rust-example" and args.to is None and not args.peer_did:
        raise UsageError("--compat rust-example needs --peer-did DID (the daemon's DID), or --to DID with a relay URL")
    http = None
    if args.http is not None:
        try:
            http = parse_hostport(args.http)
        except UrlError as exc:
            raise UsageError(f"--http: {exc}") from None
    ranges = _ranges(args.range)
    ssl_context = tls_client_context(args, args.urls)
    try:
        import mcp.server.lowlevel  # noqa: F401  (the SDK, checked before anything is dialled)
    except ImportError:
        raise CommandError("the MCP SDK is not installed: pip install 'mcp>=2.3,<3'") from None

    from ..files.bundle import open_bundle
    from .serve import load_or_create_identity

    with local_file_errors():
        bundles = [open_bundle(path) for path in args.bundle]
    identity = load_or_create_identity(args.identity, caller=True)
    return _serve(args, identity, ranges, bundles, ssl_context, http)


def _print_config(args: argparse.Namespace) -> int:
    """The ``mcpServers`` block that starts this gateway as written, with
    absolute paths: a host's PATH and working directory are not the shell's."""
    import json
    import os
    import shutil
    import sys

    from ..files.identity import default_caller_path

    identity = (args.identity or default_caller_path()).expanduser().resolve()
    if args.identity is None:
        from .serve import load_or_create_identity

        load_or_create_identity(None, caller=True)  # the host's first start finds the key there
    script = Path(sys.executable).with_name("ampcap")
    head: list[str] = []
    found = shutil.which("ampcap")
    if script.exists():
        command = str(script)
    elif found:
        command = str(Path(found).resolve())
    else:
        command, head = str(Path(sys.executable).absolute()), ["-m", "ampcap.cli.main"]
    argv = [*head, "mcp", *args.urls, "--identity", str(identity)]

    def path(value: Path) -> str:
        return str(value.expanduser().resolve())

    for flag, values in (("--peer-did", args.peer_did), ("--range", args.range), ("--capability", args.capability),
                         ("--include", args.include), ("--exclude", args.exclude)):
        for value in values:
            argv += [flag, value]
    for value in args.bundle:
        argv += ["--bundle", path(value)]
    if args.ca_file:
        argv += ["--ca-file", path(Path(args.ca_file))]
    if args.insecure:
        argv.append("--insecure")
    if args.to is not None:
        argv += ["--to", args.to]
        if args.relay_did != RELAY_DID:
            argv += ["--relay-did", args.relay_did]
    if args.compat:
        argv += ["--compat", args.compat]
    if args.tool_names != "plain":
        argv += ["--tool-names", args.tool_names]
    if args.poll != 30.0:
        argv += ["--poll", f"{args.poll:g}"]
    if args.timeout != 60.0:
        argv += ["--timeout", f"{args.timeout:g}"]
    server: dict[str, Any] = {"command": command, "args": argv}
    if os.environ.get("PYTHONPATH"):  # a source checkout run in place: the host needs it too
        server["env"] = {"PYTHONPATH": os.pathsep.join(str(Path(p).resolve())
                                                       for p in os.environ["PYTHONPATH"].split(os.pathsep) if p)}
    print(json.dumps({"mcpServers": {"ampcap": server}}, indent=2))
    return EXIT_OK


def _serve(args: argparse.Namespace, identity: Any, ranges: dict[str, Any], bundles: list[Any], ssl_context: Any,
           http: tuple[str, int] | None) -> int:
    import trio

    from ..mcp.gateway import gateway
    from ..mcp.gateway_links import DialOptions
    from ..mcp.gateway_serve import serve_http, serve_stdio
    from ..net.daemon.core import DaemonConfig
    from ..peer.config import rust_example_config

    config = DaemonConfig()
    if args.compat == "rust-example":
        connection = rust_example_config()
        config = DaemonConfig(profile=connection.profile, connection=connection)
    dials = [DialOptions(peer_did=args.peer_did[i] if args.peer_did else None, relay_to=args.to,
                         relay_did=args.relay_did, ssl_context=ssl_context, config=config)
             for i in range(len(args.urls))]

    async def main() -> None:
        async with gateway(args.urls, identity=identity, dial=dials, names=args.capability or ("*",),
                           ranges=ranges, underscore=args.tool_names == "plain", bundles=bundles, poll_s=args.poll,
                           include=args.include, exclude=args.exclude,
                           call_timeout_s=args.timeout) as server:
            if http is None:
                await serve_stdio(server)
                return
            async with trio.open_nursery() as nursery:
                url = await nursery.start(serve_http, server, http[0], http[1])
                print(f"mcp {url}", flush=True)

    from ..net.api.peer import CallsItself

    try:
        trio.run(main)
    except BaseExceptionGroup as group:  # the gateway dials every peer at once, in a nursery
        mine, rest = group.split(CallsItself)
        if mine is None or rest is not None:
            raise
        leaf: BaseException = mine
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        raise UsageError(_calls_itself(str(getattr(leaf, "did", "")))) from None
    return EXIT_OK


def _calls_itself(did: str) -> str:
    return (f"a peer to serve has this gateway's own DID ({did}): an agent does not call itself. Give the "
            f"gateway a key of its own: `ampcap keygen --out gateway.key`, then --identity gateway.key")
