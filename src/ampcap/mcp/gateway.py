"""The MCP gateway: AMP peers' capabilities served as MCP tools (ruling R18).

::

    async with ampcap.mcp.gateway(["amp://127.0.0.1:7700"]) as server:
        await ampcap.mcp.gateway_serve.serve_stdio(server)

:func:`gateway` yields a :class:`GatewayServer`, an MCP server object
(the SDK's low-level ``mcp.server.lowlevel.Server``) whose tools are the
capabilities of the peers given, kept current while the block runs: the
peers' links (:mod:`.gateway_links`) run in the block's nursery. Serve it
over any MCP transport the SDK offers (``server.run(read, write,
server.create_initialization_options())``, ``server.streamable_http_app()``),
or with :mod:`.gateway_serve`.

The mapping (docs/mcp-gateway.md): tools/list comes from the peers'
listings (:mod:`.tools` names the tools and picks the versions); tools/call
sends a CAP_INVOKE of the chosen version through the Python API and answers
``structuredContent`` plus the same JSON as text; every AMP failure is an
``isError`` result whose text starts ``CODE NAME:``. Params the tool's
schema refuses are answered there and then (4004, naming the field),
without a round trip.
A call to a peer whose link is down asks for a redial at once and waits
about a second for it (:meth:`.gateway_links.PeerLink.wait_connected`)
before answering 5002.
A PROGRESS becomes ``notifications/progress`` when the caller sent a
progress token; a cancelled tools/call stops our wait, and the invoke's one
terminal reply, when it comes, is dropped by the invoker.

Schemas. RFC 004 descriptors carry schema *references*; the bytes come from
local bundles (the Offline Registry Profile: ampcap's demo bundle is built
in, more are given with ``bundles=``), else from the peer itself, which an
ampcap peer hands out by hash (:mod:`ampcap.caps.artifacts`, fetched by the
links). A tool whose schema neither has gets a permissive object schema,
and the peer's own validation answers (4004 from the peer, same text).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession

from .. import __version__
from ..caps.bodies import EVERY_CAPABILITY
from ..caps.bundle import SchemaBundle, SchemaStore
from ..caps.descriptor import Descriptor
from ..caps.params import CompiledSchema, ParamsValidator
from ..caps.semver import Range
from ..display import shown
from ..errors import AmpError
from ..net.api.peer import Remote
from ..wire.identity import Identity
from . import tools as mapping
from .elicitation import answer_from, schema_for
from .gateway_links import DialOptions, PeerLink

__all__ = ["GatewayServer", "Gateway", "gateway"]

log = logging.getLogger("ampcap.mcp")

UNAVAILABLE, NOT_FOUND = 5002, 4002
DEFAULT_CALL_TIMEOUT_S = 60.0
MAX_SESSIONS = 1024  # MCP clients told of list changes (HTTP: one per client session)
NOTIFY_TIMEOUT_S = 2.0  # a session that does not take a list_changed in time is dropped


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    link: PeerLink
    descriptor: Descriptor
    check: CompiledSchema | None  # the params schema, when it is available locally
    listed: types.Tool


class GatewayServer(Server[Any]):
    """The SDK's low-level MCP server, announcing ``tools.listChanged``.
    :attr:`gateway` is the :class:`Gateway` behind it."""

    gateway: Gateway

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                      extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions)


class Gateway:
    """The tool table over a set of :class:`PeerLink`, and the MCP handlers."""

    def __init__(self, links: Sequence[PeerLink], *, ranges: Mapping[str, Range] | None = None,
                 underscore: bool = True, bundles: Sequence[SchemaBundle] = (),
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, name: str = "ampcap",
                 include: Sequence[str] = (), exclude: Sequence[str] = ()) -> None:
        from ..caps.demo import demo_manifest

        self.links = list(links)
        self.ranges = dict(ranges or {})
        self.underscore = underscore
        self.include, self.exclude = tuple(include), tuple(exclude)
        self.call_timeout_s = call_timeout_s
        store = SchemaStore([demo_manifest().bundle], offline=True)
        for bundle in bundles:
            store.add_bundle(bundle)
        self._store = store
        self._validator = ParamsValidator(store)
        self.tools: dict[str, _Tool] = {}
        self._listed = types.ListToolsResult(tools=[])
        self._sessions: list[ServerSession] = []
        self._nursery: trio.Nursery | None = None
        self.changes = 0  # how many times the tool set changed (tests and logs)
        for link in self.links:
            link.on_change = self._links_changed
            link.local = store
        self.server = GatewayServer(name, version=__version__, on_list_tools=self._list_tools)
        # tools/call answers the result's wire form (a dict) rather than a
        # CallToolResult: the SDK validates and serialises a handler's
        # result against the protocol version either way, so building and
        # dumping the pydantic model first is work done twice on every
        # call. The constructor's on_call_tool is typed for the model only;
        # add_request_handler takes either.
        self.server.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        self.server.gateway = self
        # The SDK wraps every request in an OpenTelemetry span by default;
        # even with no exporter that is a measurable share of a tools/call
        # (tools/bench_mcp_gateway.py). A program that traces can put
        # mcp.server._otel.OpenTelemetryMiddleware() back in this list.
        self.server.middleware = []
        self.server.add_notification_handler("notifications/initialized", types.NotificationParams,
                                             self._initialized)

    # ------------------------------------------------------------ the table

    def rebuild(self) -> bool:
        """Recompute the tools from the links' descriptors; True if the
        listing changed."""
        chosen = [{name: d for name, d in mapping.choose(link.descriptors, self.ranges).items()
                   if mapping.offered(name, self.include, self.exclude)} for link in self.links]
        names = mapping.assign_names([c.keys() for c in chosen], underscore=self.underscore)
        table: dict[str, _Tool] = {}
        for tool_name, (position, capability) in sorted(names.items()):
            descriptor = chosen[position][capability]
            held = self.tools.get(tool_name)
            if held is not None and held.descriptor == descriptor and held.link is self.links[position]:
                table[tool_name] = held
                continue
            table[tool_name] = self._tool(tool_name, self.links[position], descriptor)
        changed = [t.listed for t in table.values()] != self._listed.tools
        self.tools = table
        if changed:
            self._listed = types.ListToolsResult(tools=[t.listed for t in table.values()])
        return changed

    def _tool(self, name: str, link: PeerLink, descriptor: Descriptor) -> _Tool:
        check: CompiledSchema | None = None
        try:
            check = self._validator.compiled(descriptor.id, descriptor.input_schema)
            params_schema = self._store.load_json(descriptor.input_schema)
        except AmpError:  # not in a local bundle: the one the peer handed out, if any; the peer validates
            params_schema = link.schema(descriptor.input_schema)
        try:
            result_schema = self._store.load_json(descriptor.output_schema)
        except AmpError:
            result_schema = link.schema(descriptor.output_schema)
        description = descriptor.notes or f"AMP capability {descriptor.id}"
        if len(self.links) > 1:
            description += f" (peer {link.label})"
        notice = link.deprecations.get(descriptor.id)  # R23: said in-band by the peer
        if notice is not None:
            description += f" Deprecated: {notice.line()}."
        hints = mapping.annotations_for(descriptor)
        listed = types.Tool(name=name, description=description, title=hints.get("title"),
                            input_schema=mapping.input_schema_for(params_schema),
                            output_schema=mapping.output_schema_for(result_schema),
                            annotations=types.ToolAnnotations.model_validate(hints) if hints else None)
        return _Tool(name, link, descriptor, check, listed)

    def _links_changed(self) -> None:
        if not self.rebuild():
            return
        self.changes += 1
        log.info("tool list changed: %d tools", len(self.tools))
        if self._nursery is not None and self._sessions:
            self._nursery.start_soon(self._notify_all)

    async def _notify_all(self) -> None:
        for session in list(self._sessions):
            try:
                with trio.fail_after(NOTIFY_TIMEOUT_S):
                    await session.send_tool_list_changed()
            except Exception:  # gone (the host disconnected) or not reading
                log.info("dropping an MCP session that did not take tools/list_changed")
                if session in self._sessions:
                    self._sessions.remove(session)

    # ------------------------------------------------------------ handlers

    async def _initialized(self, ctx: ServerRequestContext[Any], params: types.NotificationParams) -> None:
        # The session outlives this notification: list_changed goes through it.
        session = ctx.session
        self._sessions.append(session)
        # Forgotten when its connection closes. The SDK offers that hook on
        # the connection (exit_stack), which the session holds privately;
        # without it, a session is dropped when a notification fails, and
        # the list keeps only the newest MAX_SESSIONS either way.
        connection = getattr(session, "_connection", None)
        exit_stack = getattr(connection, "exit_stack", None)
        if exit_stack is not None:
            exit_stack.callback(self._forget, session)
        del self._sessions[:-MAX_SESSIONS]

    def _forget(self, session: ServerSession) -> None:
        if session in self._sessions:
            self._sessions.remove(session)

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return self._listed

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> dict[str, Any]:
        """A tools/call, answered with a CallToolResult's wire form."""
        tool = self.tools.get(params.name)
        if tool is None:
            return _failure(AmpError(NOT_FOUND, f"no tool named {shown(params.name)}"))
        arguments: Any = params.arguments if params.arguments is not None else {}
        if tool.check is not None:
            try:
                tool.check.validate(arguments, root="params")
            except AmpError as exc:
                return _failure(exc)
        remote = tool.link.remote
        if remote is None or not remote.open:
            # Down: redial now (rate-limited) and give it a moment, so the
            # first call after the peer is back finds it.
            remote = await tool.link.wait_connected()
            if remote is None:
                return _failure(AmpError(UNAVAILABLE, f"peer {shown(tool.link.label)} is unreachable (redialling)"))
        last = 0.0

        async def progress(pct: int | None, text: str | None) -> None:
            nonlocal last
            if pct is None:  # progress without a total (AMP PROCESSING): one more step, total unknown
                last += 1.0
                await ctx.session.report_progress(last, None, text)
                return
            last = max(last, float(pct))  # MCP progress only grows
            await ctx.session.report_progress(last, 100.0, text)

        async def ask(prompt: str, options: tuple[str, ...] | None) -> str | None:
            # AMP INPUT_REQUIRED -> an elicitation to the host (when it offers
            # them); its answer goes back, anything else declines.
            if not ctx.session.check_client_capability(types.ClientCapabilities(
                    elicitation=types.ElicitationCapability())):
                return None
            reply = await ctx.session.elicit(prompt, schema_for(options))
            return answer_from(reply.action, reply.content)

        try:
            result = await remote.invoke(tool.descriptor.id, params=arguments, timeout=self.call_timeout_s,
                                         on_progress=progress, on_input=ask)
        except AmpError as exc:
            return _failure(exc)
        structured, text = mapping.result_content(result)
        return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}


def _failure(error: AmpError) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": mapping.error_text(error)}], "isError": True}


@asynccontextmanager
async def gateway(peers: str | Remote | Sequence[str | Remote], *, identity: Identity | None = None,
                  dial: DialOptions | Sequence[DialOptions] = DialOptions(), names: Sequence[str] = (EVERY_CAPABILITY,),
                  ranges: Mapping[str, str | Range] | None = None, underscore: bool = True,
                  bundles: Sequence[SchemaBundle] = (), poll_s: float = 30.0,
                  call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S, include: Sequence[str] = (),
                  exclude: Sequence[str] = ()) -> AsyncIterator[GatewayServer]:
    """An MCP server whose tools are the capabilities of ``peers`` (URLs to
    dial and keep dialled, or :class:`Remote` connections the caller holds).

    ``identity`` signs our messages (default: the callers' default key
    file, ``caller.json``, apart from a local daemon's);
    ``dial`` says how to reach URL peers (one for all, or one per peer); ``names`` are the capability
    names to list (default ``"*"``, every one: an ampcap extension);
    ``ranges`` maps a capability name to the version range to offer
    (newest inside it); ``underscore`` (the default) names tools with
    ``[A-Za-z0-9_-]`` only, as LLM tool APIs require, False keeps the dots;
    ``include``/``exclude`` are glob patterns on capability names;
    ``bundles`` hold the peers' schemas (RFC 004 offline profile);
    ``poll_s`` is how often the peers are listed again. The yielded server
    is ready once every peer was dialled once (reached or not).
    """
    if isinstance(peers, (str, Remote)):
        peers = [peers]
    if not peers:
        raise ValueError("the gateway needs at least one peer")
    if not poll_s > 0 or math.isnan(poll_s):
        raise ValueError("poll_s must be a positive number of seconds")
    parsed = {name: r if isinstance(r, Range) else Range.parse(r) for name, r in (ranges or {}).items()}
    if identity is None and any(isinstance(p, str) for p in peers):
        import os

        from ..files.identity import load_or_create

        identity = load_or_create(None, os.urandom, caller=True)[0]
    dials = [dial] * len(peers) if isinstance(dial, DialOptions) else list(dial)
    if len(dials) != len(peers):
        raise ValueError("give one DialOptions, or one per peer")
    links = [PeerLink(p, i, identity=identity, dial=d, names=names, poll_s=poll_s)
             for i, (p, d) in enumerate(zip(peers, dials))]
    gate = Gateway(links, ranges=parsed, underscore=underscore, bundles=bundles, call_timeout_s=call_timeout_s,
                   include=include, exclude=exclude)
    async with trio.open_nursery() as nursery:
        gate._nursery = nursery
        async with trio.open_nursery() as starting:  # every peer dialled at once
            for link in links:
                starting.start_soon(nursery.start, link.run)
        gate.rebuild()
        try:
            yield gate.server
        finally:
            nursery.cancel_scope.cancel()
