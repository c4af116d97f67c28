"""The Python API: serve capabilities and call other agents' capabilities.

::

    import ampcap

    peer = ampcap.Peer()                      # the default identity file (created if missing)

    @peer.capability("org.example.greet", version="1.0.0")
    async def greet(name: str, excited: bool = False) -> dict:
        return {"greeting": f"Hello, {name}{'!' if excited else '.'}"}

    async with peer.serve("amp://127.0.0.1:7700") as server:
        print(server.url, server.did)
        ...

    async with ampcap.connect("amp://127.0.0.1:7700") as remote:
        out = await remote.invoke("org.example.greet", version="1.0.0", params={"name": "Ada"})

A capability's input JSON Schema is derived from the function's type hints
(through ``msgspec``), or given with ``schema={...}``. Plain functions run in
a worker thread, ``async def`` ones in the event loop. A parameter named
``ctx`` receives an :class:`InvocationContext` with ``await ctx.progress(pct,
text)`` (RFC 006 PROGRESS to the caller) and ``await ctx.sleep(ms)``.

Every connection carries both directions: a :class:`Remote` obtained from
``peer.connect()`` may be invoked *by* the other side too, with the
capabilities this peer declared.
"""

from __future__ import annotations

import functools
import inspect
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints

import msgspec
import trio

from ..caps.bindings import InvocationContext as _ContextProtocol
from ..caps.catalog import Catalog
from ..caps.descriptor import Descriptor
from ..caps.names import OssaRef, is_full_id, parse_ossa_uri
from ..caps.order import ORDERS, Order
from ..errors import AmpError
from ..peer.invoker import RetryPolicy, Target
from ..peer.policy import ALLOW_ALL, Policy
from ..wire.cbor import UINT64_MAX  # timeout_ms and limit are wire uints
from ..files.identity import load_or_create
from ..wire.identity import Identity, KeyResolver
from ..wire.registry import MessageType
from .bindings_runner import RunnerContext, ThreadContext, run_in_thread
from ..session.record import ThreadMode
from .clock import SYSTEM_CLOCK, Clock
from .sessions import Session
from .daemon import RELAY_DID, Daemon, DaemonConfig, Link
from .url import AmpUrl, parse_url

if TYPE_CHECKING:
    from ..caps.manifest import Manifest
    from ..store.database import StateStore

# The manifest model, its loaders and the JSON Schema compilers are imported
# where capabilities are offered: a caller (`ampcap invoke`, `ampcap.connect`)
# never needs them, and they are a good part of a one-shot command's start-up.

__all__ = ["Peer", "Remote", "Server", "Negotiate", "QueryResult", "InvocationContext", "capability", "connect"]

F = TypeVar("F", bound=Callable[..., Any])
ProgressCallback = Callable[[int | None, str | None], Any]
InputCallback = Callable[[str, tuple[str, ...] | None], Any]  # -> str (the answer) or None (decline)
InvocationContext = RunnerContext  # what a ``ctx`` parameter receives
_CONTEXT_PARAM = "ctx"
_DRAFT7 = "http://json-schema.org/draft-07/schema#"


class Negotiate(msgspec.Struct, frozen=True, kw_only=True):
    """RFC 004 §6.3 hints: the preferred version, then acceptable ones in
    order, then the highest provider version inside ``range``."""

    preferred: str | None = None
    acceptable: Sequence[str] = ()
    range: str | None = None

    def to_wire(self) -> dict[str, Any]:
        hints: dict[str, Any] = {}
        if self.preferred is not None:
            hints["preferred"] = self.preferred
        if self.acceptable:
            hints["acceptable"] = list(self.acceptable)
        if self.range is not None:
            hints["range"] = self.range
        if not hints:
            raise ValueError("Negotiate needs preferred, acceptable or range")
        return hints


class QueryResult(msgspec.Struct, frozen=True):
    """A CAP_DECLARE page: the descriptors, and the cursor for the next page."""

    capabilities: tuple[Descriptor, ...]
    next_cursor: str | None

    def __iter__(self) -> Iterator[Descriptor]:
        return iter(self.capabilities)

    def __len__(self) -> int:
        return len(self.capabilities)


class _Registered(msgspec.Struct, frozen=True):
    name: str
    version: str
    schema: Any
    output_schema: Any
    notes: str | None
    aliases: tuple[str, ...]
    handler: Callable[[Any, RunnerContext], Awaitable[Any]]
    idempotent: bool = False  # R19: an invoke a restart interrupted runs again on retry

    def manifest_entry(self) -> dict[str, Any]:
        """This capability as a manifest table: the Python API's capabilities
        pass the same checks as a manifest file's."""
        return {"name": self.name, "version": self.version, "input_schema": self.schema,
                "output_schema": self.output_schema, "binding": {"python": f"{__name__}:_local_only"},
                **({"notes": self.notes} if self.notes else {}), **({"aliases": list(self.aliases)} if self.aliases else {}),
                **({"idempotent": True} if self.idempotent else {})}


def _load_identity(identity: Identity | str | os.PathLike[str] | None) -> Identity:
    if isinstance(identity, Identity):
        return identity
    return load_or_create(identity, os.urandom)[0]


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema (draft-07) object for ``fn``'s keyword parameters
    (``ctx`` excluded), derived with ``msgspec`` from the type hints; closed
    to other keys unless ``fn`` takes ``**kwargs``."""
    try:
        hints = get_type_hints(fn)
    except NameError as exc:  # a hint naming something not importable where fn lives
        raise TypeError(f"{fn.__name__}: its type hints cannot be resolved ({exc}); give the capability an "
                        "explicit schema={...}") from None
    fields: list[Any] = []
    ctx_name = _context_param(fn)
    parameters = inspect.signature(fn).parameters.values()
    open_ended = any(param.kind is param.VAR_KEYWORD for param in parameters)
    for param in parameters:
        if param.name == ctx_name or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{fn.__name__}: positional-only parameter {param.name!r} cannot take a named param")
        annotation = hints.get(param.name, Any)
        if param.default is param.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
    struct = msgspec.defstruct(f"{fn.__name__}_params", fields)
    try:
        generated = msgspec.json.schema(struct)
    except TypeError:
        for name, annotation, *_ in fields:  # which parameter: msgspec's message does not say
            try:
                msgspec.json.schema(annotation)
            except TypeError:
                raise TypeError(f"{fn.__name__}: no JSON Schema can be derived from the type of parameter "
                                f"{name!r} ({getattr(annotation, '__name__', annotation)}); give the "
                                "capability an explicit schema={...}") from None
        raise
    generated = _as_draft7(generated)
    defs = dict(generated.get("$defs", {}))
    body = dict(defs.pop(f"{fn.__name__}_params", {"type": "object"}))
    body.pop("title", None)
    schema: dict[str, Any] = {"$schema": _DRAFT7, **body, "additionalProperties": open_ended}
    if defs:
        schema["$defs"] = defs
    return schema


def _as_draft7(node: Any) -> Any:
    """msgspec writes tuples in 2020-12 terms (``prefixItems``, then
    ``items: false``); under the draft-07 label that would refuse every item.
    Draft-07 spells it ``items: [...]`` and ``additionalItems``."""
    if isinstance(node, list):
        return [_as_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _as_draft7(value) for key, value in node.items()}
    if "prefixItems" in out:
        rest = out.pop("items", None)
        out["items"] = out.pop("prefixItems")
        if rest is not None:
            out["additionalItems"] = rest
    return out


_API_BUNDLE = "ampcap.local.api"


def _check_registration(reg: _Registered, registered: Sequence[_Registered]) -> None:
    """ValueError naming every problem with one capability (name, version,
    schemas, aliases), or a second registration of the same id."""
    from ..caps.manifest import ManifestError, manifest_from_data

    ident = f"{reg.name}:{reg.version}"
    if any(r.name == reg.name and r.version == reg.version for r in registered):
        raise ValueError(f"capability {ident} is already registered on this peer")
    try:
        manifest_from_data({"bundle_id": _API_BUNDLE, "capability": [reg.manifest_entry()]}, source="<python api>")
    except ManifestError as exc:
        problems = "; ".join(f"{p.key}: {p.message}" if p.key else p.message for p in exc.problems)
        raise ValueError(f"capability {ident}: {problems}") from None


def _context_param(fn: Callable[..., Any]) -> str | None:
    """The parameter that receives the invocation context: the one annotated
    ``InvocationContext`` (whatever its name), else one named ``ctx``."""
    parameters = inspect.signature(fn).parameters
    for name, param in parameters.items():
        annotation = param.annotation
        if annotation is RunnerContext or annotation is _ContextProtocol or (
                isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "InvocationContext"):
            return name
    return _CONTEXT_PARAM if _CONTEXT_PARAM in parameters else None


def _adapt(fn: Callable[..., Any]) -> Callable[[Any, RunnerContext], Awaitable[Any]]:
    """Turn ``fn(**params[, ctx=...])`` into the daemon's (params, context) handler."""
    ctx_name = _context_param(fn)
    is_async = inspect.iscoroutinefunction(fn)
    try:
        hints = {name: hint for name, hint in get_type_hints(fn).items()
                 if name not in ("return", ctx_name) and hint is not Any}
    except NameError:  # no hints to honour (the capability has an explicit schema)
        hints = {}

    def typed(params: Mapping[str, Any]) -> dict[str, Any]:
        # The params passed the JSON Schema; give the function the types it
        # declared (a dataclass, an Enum member, a tuple), not their JSON form.
        kwargs = dict(params)
        for name, hint in hints.items():
            if name in kwargs:
                try:
                    kwargs[name] = msgspec.convert(kwargs[name], hint, strict=False)
                except msgspec.ValidationError as exc:
                    raise AmpError(4004, f"params.{name}: {exc}", path=f"params.{name}") from None
        return kwargs

    async def handler(params: Any, context: RunnerContext) -> Any:
        kwargs = typed(params) if isinstance(params, Mapping) else {}
        if is_async:
            if ctx_name is not None:
                kwargs[ctx_name] = context
            return await fn(**kwargs)
        if ctx_name is not None:  # a plain function cannot await: progress and sleep are plain calls
            kwargs[ctx_name] = ThreadContext(context)
        # A plain function may block: keep it off the event loop.
        return await run_in_thread(functools.partial(fn, **kwargs))

    return handler


def _local_only(params: Any) -> Any:  # pragma: no cover - never called: the daemon uses the handler
    raise AmpError(5001, "capability registered through the Python API has no importable binding")


class CallsItself(ValueError):
    """The peer a call would go to has the caller's own DID.

    Two programs with one identity (``ampcap serve`` and a caller that both
    use the default identity file) are one agent to everybody else: through
    a relay, the caller registers under the daemon's DID and its calls come
    back to itself. Raised by :meth:`Peer.connect` before any request is
    sent; give the caller an identity of its own.
    """

    def __init__(self, did: str) -> None:
        super().__init__(f"the peer to call has this caller's own DID ({did}): the caller would call itself; "
                         f"give the caller an identity of its own")
        self.did = did


class Peer:
    """An agent: an identity, the capabilities it offers, and its connections.

    :param identity: an :class:`~ampcap.wire.identity.Identity`, a key file
        path, or ``None`` for the default identity file (created if missing).
    :param policy: who may query/invoke what: a :class:`~ampcap.peer.policy.Policy`
        or a policy file path (``docs/policy.md``); everyone, everything by default.
    :param resolver: resolves non-``did:key`` senders (a keyring).
    :param config: limits, timeouts and framing (:class:`DaemonConfig`).
    :param manifest: more capabilities to serve, beside the decorated ones:
        a :class:`~ampcap.caps.manifest.Manifest` or a manifest file path
        (``docs/manifest.md``), whose bindings are checked now, as
        ``ampcap serve --manifest`` does.
    :param tls: what :meth:`serve` presents on ``amps://`` URLs
        (``ampcap.net.tls.server_context(cert, key)``); without it the peer
        serves plain ``amp://`` only.
    """

    def __init__(self, identity: Identity | str | os.PathLike[str] | None = None, *,
                 policy: Policy | str | os.PathLike[str] = ALLOW_ALL, resolver: KeyResolver | None = None,
                 config: DaemonConfig = DaemonConfig(), clock: Clock = SYSTEM_CLOCK,
                 manifest: Manifest | str | os.PathLike[str] | None = None,
                 tls: ssl.SSLContext | None = None, store: StateStore | None = None) -> None:
        self.identity = _load_identity(identity)
        self.tls = tls
        # Durable state (R19): StateStore.open(directory) keeps the invoke
        # journal across restarts; None keeps everything in memory.
        self.store = store
        # Files are read now, so a mistake in one fails here, not at serve().
        if isinstance(policy, (str, os.PathLike)):
            from ..files.policy import load_policy

            policy = load_policy(policy)
        self.policy = policy
        if isinstance(manifest, (str, os.PathLike)):
            from ..files.manifest import load_manifest

            manifest = load_manifest(manifest, check_bindings=True)
        self.resolver = resolver
        self.config = config
        self.clock = clock
        self._manifest = manifest
        self._registered: list[_Registered] = []
        self._daemon: Daemon | None = None

    @property
    def did(self) -> str:
        """This peer's DID (``did:key:z…``)."""
        return self.identity.did

    # --------------------------------------------------------- capabilities

    def capability(self, name: str, version: str = "1.0.0", *, schema: Mapping[str, Any] | None = None,
                   output_schema: Mapping[str, Any] | bool = True, notes: str | None = None,
                   aliases: Sequence[str] = (), idempotent: bool = False) -> Callable[[F], F]:
        """Decorator: offer ``fn`` as capability ``name:version``.

        The function is called with the invoke's params as keyword arguments
        (and ``ctx`` if it declares one); its return value (CBOR-encodable)
        is the result. Raise :class:`~ampcap.AmpError` to fail with a chosen
        code; any other exception becomes 5001 for the caller.
        """

        def decorate(fn: F) -> F:
            if self._daemon is not None:
                raise RuntimeError("register capabilities before serving or connecting")
            input_schema = dict(schema) if schema is not None else schema_from_signature(fn)
            out = dict(output_schema) if isinstance(output_schema, Mapping) else output_schema
            reg = _Registered(name=name, version=version, schema=input_schema, output_schema=out,
                              notes=notes or _first_line(fn.__doc__), aliases=tuple(aliases), handler=_adapt(fn),
                              idempotent=idempotent)
            _check_registration(reg, self._registered)  # here, where the mistake is, not at serve()
            self._registered.append(reg)
            return fn

        return decorate

    def include(self, *functions: Callable[..., Any]) -> None:
        """Register functions marked with the module-level :func:`capability`."""
        for fn in functions:
            spec = getattr(fn, "__ampcap_capability__", None)
            if spec is None:
                raise TypeError(f"{fn!r} is not marked with @ampcap.capability")
            name, version, kwargs = spec
            self.capability(name, version, **kwargs)(fn)

    def _build_daemon(self) -> Daemon:
        specs: list[Any] = []
        bundles = []
        handlers: dict[str, Callable[[Any, RunnerContext], Awaitable[Any]]] = {}
        if self._registered:
            from ..caps.manifest import manifest_from_data

            data = {"bundle_id": _API_BUNDLE, "capability": [r.manifest_entry() for r in self._registered]}
            local = manifest_from_data(data, source="<python api>")
            specs.extend(local.capabilities)
            bundles.append(local.bundle)
            for reg, spec in zip(self._registered, local.capabilities):
                handlers[spec.id] = reg.handler
        if self._manifest is not None:
            specs.extend(self._manifest.capabilities)
            bundles.append(self._manifest.bundle)
        from ..caps.bundle import SchemaStore
        from ..caps.params import ParamsValidator

        catalog = Catalog(specs, cursor_key=os.urandom(32))
        return Daemon(self.identity, catalog, config=self.config, policy=self.policy,
                      params=ParamsValidator(SchemaStore(bundles, offline=True)), resolver=self.resolver,
                      handlers=handlers, clock=self.clock, ssl_context=self.tls, store=self.store)

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[Daemon]:
        """The peer's daemon, started by the outermost ``serve``/``connect``."""
        if self._daemon is not None:
            yield self._daemon
            return
        daemon = self._build_daemon()
        self._daemon = daemon
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(daemon.run)
                try:
                    yield daemon
                finally:
                    with trio.CancelScope(shield=True):
                        await daemon.drain()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # An error raised in the caller's block (say AmpError from invoke)
            # should leave the block as itself, not wrapped by our nursery.
            only = _sole_error(group)
            if only is None:
                raise
            raise only from None
        finally:
            self._daemon = None

    # ----------------------------------------------------------- serving

    @asynccontextmanager
    async def serve(self, url: str = "amp://127.0.0.1:7700", *, drain_timeout: float | None = None
                    ) -> AsyncIterator[Server]:
        """Listen on ``url`` (port 0 = any free port) while the block runs;
        on exit, GOAWAY to every peer and drain (see :meth:`Daemon.drain`)."""
        if not url.startswith(("amp:", "amps:")):  # HTTP/WebSocket are served by `serve --http` (HttpFront)
            raise ValueError(f"Peer.serve listens on amp:// or amps:// URLs, not {url!r}")
        if url.endswith(":0"):  # parse_url refuses port 0; here it means "any free port"
            host, port, tls = _host_of(url), 0, url.startswith("amps:")
        else:
            target = parse_url(url)
            host, port, tls = target.host, target.port, target.tls
        if tls != (self.tls is not None):
            # One daemon listens with one TLS setting: the URL's scheme must agree with it.
            raise ValueError("serving amps:// needs Peer(tls=ampcap.net.tls.server_context(cert, key))" if tls
                             else "this peer has a TLS context: serve an amps:// URL")
        async with self._running() as daemon:
            listeners = await daemon.listen(host, port)
            bound = listeners[0].socket.getsockname()
            server = Server(url=str(AmpUrl("amps" if tls else "amp", bound[0], bound[1])), did=self.did,
                            daemon=daemon)
            try:
                yield server
            finally:
                if drain_timeout is not None:
                    with trio.CancelScope(shield=True):
                        await daemon.drain(drain_timeout)

    @asynccontextmanager
    async def join_relay(self, relay_url: str, *, relay_did: str = RELAY_DID, timeout: float = 10.0,
                         ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[None]:
        """Register at a relay like the public Rust example's for the block's
        duration: invokes addressed to this peer's DID reach it through the
        relay and are answered the same way (see :meth:`Daemon.join_relay`)."""
        async with self._running() as daemon:
            link = await daemon.join_relay(relay_url, relay_did=relay_did, timeout_s=timeout, ssl_context=ssl_context)
            try:
                yield
            finally:
                link.driver.close()

    async def serve_forever(self, url: str = "amp://127.0.0.1:7700",
                            *, task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled (``nursery.start(peer.serve_forever, url)`` reports the :class:`Server`)."""
        async with self.serve(url) as server:
            task_status.started(server)
            await trio.sleep_forever()

    # ----------------------------------------------------------- calling

    @asynccontextmanager
    async def connect(self, url: str, *, peer_did: str | None = None, timeout: float = 10.0,
                      relay_to: str | None = None, relay_did: str = RELAY_DID,
                      ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Remote]:
        """Open a connection to ``url`` for the duration of the block.

        ``url`` is ``amp(s)://``, ``https://``/``http://`` (RFC 002 §6: POST
        and polling) or ``wss://``/``ws://`` (§5), or several endpoints of
        the peer separated by commas, tried in the order ``amps > wss > https``.

        ``peer_did`` pins whom we expect to reach (3001 if someone else answers).
        With ``relay_to``, ``url`` is a relay like the public Rust example's:
        this peer registers there and every call is addressed to ``relay_to``.
        ``ssl_context`` verifies an ``amps://`` server (default: the system
        trust store; ``ampcap.net.tls.client_context(ca_file=...)`` for a
        self-signed one).

        Failing to connect raises :class:`AmpError`: 5002 when nothing answers
        at ``url`` (refused, unknown host; :class:`ampcap.errors.Unreachable`,
        also an ``OSError``) or TLS fails, 5003 when the handshake takes
        longer than ``timeout`` seconds, 3001 when ``peer_did`` does not
        match. A malformed URL is a ``ValueError``; so is a target whose DID
        (``relay_to``, ``peer_did``, or the one the peer's HELLO names) is
        this peer's own (:class:`CallsItself`, raised before any request is
        sent).
        """
        for named in (relay_to, peer_did):
            if named == self.did:  # before anything is sent: see CallsItself
                raise CallsItself(self.did)
        async with self._running() as daemon:
            if relay_to is not None:
                link = await daemon.join_relay(url, relay_did=relay_did, timeout_s=timeout, ssl_context=ssl_context)
            else:
                link = await daemon.connect(url, peer_did=peer_did, timeout_s=timeout, ssl_context=ssl_context)
                if link.peer_did == self.did:  # its HELLO named our own DID: no request goes out
                    link.driver.close()
                    raise CallsItself(self.did)
            try:
                yield Remote(daemon, link, to=relay_to, url=None if relay_to is not None else url,
                             ssl_context=ssl_context)
            finally:
                link.driver.close()
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await link.driver.closed.wait()


class Server(msgspec.Struct, frozen=True):
    """A listening peer: the URL it is reachable at and its DID."""

    url: str
    did: str
    daemon: Daemon

    @property
    def connections(self) -> int:
        return len(self.daemon.links)

    def remotes(self) -> list[Remote]:
        """Every open connection, whoever dialled it. Each works both ways:
        a peer that connected to us can be invoked over its connection."""
        return [Remote(self.daemon, link) for link in list(self.daemon.links) if link.open]

    def remote(self, did: str) -> Remote:
        """The open connection to the peer ``did`` (KeyError if there is none)."""
        for link in list(self.daemon.links):
            if link.open and link.peer_did == did:
                return Remote(self.daemon, link)
        raise KeyError(f"no open connection with {did}")


class Remote:
    """One open connection to another agent, seen from the caller's side."""

    def __init__(self, daemon: Daemon, link: Link, *, to: str | None = None, url: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._daemon = daemon
        self._link = link
        self._to = to  # through a relay: the agent calls are addressed to
        self._url = url  # where a session dials again after a lost connection
        self._ssl = ssl_context

    @property
    def did(self) -> str:
        """The DID the other side proved in HELLO / HELLO_ACK (through a
        relay: the DID calls are addressed to, proved by every signed reply)."""
        if self._to is not None:
            return self._to
        assert self._link.peer_did is not None
        return self._link.peer_did

    async def query(self, name: str, *, range: str | None = None, limit: int | None = None,
                    cursor: str | None = None, order: Order | None = None, timeout: float = 30.0) -> QueryResult:
        """CAP_QUERY: descriptors of ``name`` (an alias or legacy type works too),
        optionally within a version ``range``; raises :class:`AmpError` (4002, 4003…).
        ``name="*"`` lists every capability the peer lets us see (an ampcap
        extension, docs/mcp-gateway.md; other peers answer 4002)."""
        if limit is not None and not 0 <= limit <= UINT64_MAX:
            raise ValueError(f"limit must be from 0 to {UINT64_MAX}")
        if order is not None and order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(map(repr, ORDERS))}, not {order!r}")
        flt: dict[str, Any] = {"capability": name}
        if range is not None:
            flt["version"] = range
        answer = await self._daemon.calls.query(self._link, flt, limit=limit, cursor=cursor, order=order,
                                                timeout_ms=_ms(timeout), to=self._to)
        return QueryResult(answer.descriptors, answer.next_cursor)

    async def invoke(self, capability: str, *, version: str | None = None, range: str | None = None,
                     negotiate: Negotiate | None = None, params: Any = None, timeout: float = 60.0,
                     on_progress: ProgressCallback | None = None, retry: bool | RetryPolicy = False,
                     encrypt: bool = False, delegation: Any = None,
                     on_input: InputCallback | None = None) -> Any:
        """CAP_INVOKE and wait for the one outcome; returns the result.

        ``delegation`` invokes on a delegator's behalf (RFC 005): a chain of
        credentials (:class:`ampcap.deleg.credential.Credential` or their
        COSE bytes, first link first, the last one delegating to this
        caller), or an evidence map ``{"chain": [...]}`` as sent.

        ``capability`` is a full id (``name:version``) or a name combined
        with exactly one of ``version``, ``range`` or ``negotiate``; an OSSA
        or MCP URI (``ossa:demo/add@1.0``) alone asks for OSSA's compatible
        versions, the range ``>=1.0.0 <2.0.0`` (same major, minor at least
        the URI's). Raises
        :class:`AmpError` with the remote code, 5003 when ``timeout``
        seconds pass without a terminal reply, or, when the connection ends
        first, the code and reason that ended it (5002 without a code: the
        peer closed it). ``on_progress(pct, text)``
        (plain or async) sees every PROGRESS; ``on_input(prompt, options)``
        (plain or async) answers the provider's questions (RFC 006
        INPUT_REQUIRED) with a string, or None to decline (without it every
        question is declined). ``retry=True`` resends the same
        message after a local timeout or a retryable ERROR (RFC 001 §16.3; the
        provider runs it once; a CAP_RESULT error is final). ``encrypt=True``
        sends the invoke authcrypted (RFC 001 §8.5) to the peer's X25519 key
        (did:key, or the keyring); an ampcap daemon encrypts its replies back.
        """
        target = _target(capability, version, range, negotiate)
        policy = RetryPolicy() if retry is True else retry if isinstance(retry, RetryPolicy) else None
        evidence = None
        if delegation is not None:
            from ..deleg.chain import evidence_body  # only a delegated call loads the RFC 005 model

            evidence = evidence_body(delegation)
        return await self._daemon.calls.invoke(self._link, target, {} if params is None else params,
                                               timeout_ms=_ms(timeout), retry=policy, on_progress=on_progress,
                                               to=self._to, encrypt=encrypt, delegation=evidence,
                                               on_input=on_input)

    # RFC 005 DELEG_* messages: the peer as delegate, verifier or publisher.

    async def deleg_grant(self, credential: Any, *, timeout: float = 10.0) -> None:
        """DELEG_GRANT: hand the peer a credential (a ``Credential``); it
        verifies and keeps it, or raises its AmpError."""
        from ..deleg.bodies import grant_body

        await self._deleg(MessageType.DELEG_GRANT, grant_body(credential), timeout)

    async def deleg_revoke(self, revocation: Any, *, timeout: float = 10.0) -> None:
        """DELEG_REVOKE: a signed ``Revocation`` (``ampcap.deleg.credential.revoke``)."""
        from ..deleg.bodies import revoke_body

        await self._deleg(MessageType.DELEG_REVOKE, revoke_body(revocation), timeout)

    async def deleg_query(self, delegation_id: str, *, delegator: str | None = None,
                          timeout: float = 10.0) -> Any:
        """DELEG_QUERY: the peer's status for a delegation, as a
        ``ampcap.deleg.revocation.QueryResult`` (1001 if its answer is not one)."""
        from ..deleg.bodies import query_body
        from ..deleg.revocation import query_result_from_wire

        answer = await self._deleg(MessageType.DELEG_QUERY, query_body(delegation_id, delegator), timeout)
        return query_result_from_wire(answer.body)

    async def _deleg(self, typ: int, body: dict[str, Any], timeout: float) -> Any:
        return await self._daemon.calls.request(self._link, int(typ), body, timeout_ms=_ms(timeout), to=self._to)

    def new_session(self, *, pin: Mapping[str, str] | None = None, independent: bool = False,
                    expires_in: float = 3600.0, purpose: str | None = None, reconnect_attempts: int = 5) -> Session:
        """An RFC 006 session not opened yet (``await s.open()``; ``close()`` it
        when done, or let it expire). :meth:`session` does both around a block."""
        if self._to is not None:
            raise ValueError("sessions through a relay are not supported")
        return Session(self._daemon, self._link, url=self._url, pin=pin,
                       mode=ThreadMode.INDEPENDENT if independent else ThreadMode.COUPLED,
                       expires_in_ms=_ms(expires_in), purpose=purpose, ssl_context=self._ssl,
                       reconnect_attempts=reconnect_attempts)

    @asynccontextmanager
    async def session(self, *, pin: Mapping[str, str] | None = None, independent: bool = False,
                      expires_in: float = 3600.0, purpose: str | None = None,
                      reconnect_attempts: int = 5) -> AsyncIterator[Session]:
        """An RFC 006 session for the block (see :mod:`ampcap.net.sessions`):
        ``pin`` maps capability names to the full ids they keep for the whole
        session (4003 if the provider cannot serve one). A lost connection is
        dialled again and the session resumed, up to ``reconnect_attempts``."""
        session = self.new_session(pin=pin, independent=independent, expires_in=expires_in, purpose=purpose,
                                   reconnect_attempts=reconnect_attempts)
        await session.open()
        try:
            yield session
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await session.close()
                except AmpError:
                    pass  # the session ends with its expiry instead

    def existing_session(self, session_id: bytes, *, reconnect_attempts: int = 2) -> Session:
        """A handle on a session opened earlier (by this identity, perhaps in
        another process): ``await s.resume()`` first (it learns the mode and
        the pins), then invoke, ``close()``... Nothing is sent until then."""
        session = Session(self._daemon, self._link, url=self._url, pin=None, mode=ThreadMode.COUPLED,
                          expires_in_ms=1, purpose=None, ssl_context=self._ssl,
                          reconnect_attempts=reconnect_attempts)
        session.client.session_id = bytes(session_id)
        return session

    def on_declare(self, callback: Callable[[Any], None] | None) -> None:
        """Call ``callback(body)`` for every CAP_DECLARE the other side
        sends unasked (without ``reply_to``: announcing its capabilities,
        not answering a query), or stop with ``None``. The body passed the
        CDDL checks; ``callback`` runs in the connection's task and must
        not block."""
        self._link.on_declare = callback

    @property
    def open(self) -> bool:
        """Is the connection still open (neither side closed it)?"""
        return self._link.open

    async def closed(self) -> None:
        """Wait until the connection has ended, whoever ended it."""
        await self._link.driver.closed.wait()

    async def aclose(self) -> None:
        self._link.driver.close()
        await self._link.driver.closed.wait()


@asynccontextmanager
async def connect(url: str, *, identity: Identity | str | os.PathLike[str] | None = None,
                  peer_did: str | None = None, timeout: float = 10.0,
                  config: DaemonConfig = DaemonConfig(), relay_to: str | None = None,
                  relay_did: str = RELAY_DID, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Remote]:
    """Connect to ``url`` as a peer that offers no capabilities (a pure
    caller); ``relay_to`` and ``ssl_context`` as in :meth:`Peer.connect`."""
    async with Peer(identity, config=config).connect(url, peer_did=peer_did, timeout=timeout,
                                                     relay_to=relay_to, relay_did=relay_did,
                                                     ssl_context=ssl_context) as remote:
        yield remote


def capability(name: str, version: str = "1.0.0", **kwargs: Any) -> Callable[[F], F]:
    """Mark a module-level function as a capability without a :class:`Peer`
    at hand (same arguments as :meth:`Peer.capability`); register it later
    with ``peer.include(fn)``."""

    def mark(fn: F) -> F:
        fn.__ampcap_capability__ = (name, version, kwargs)  # type: ignore[attr-defined]
        return fn

    return mark


def _target(capability: str, version: str | None, range: str | None, negotiate: Negotiate | None) -> Target:
    chosen = sum(x is not None for x in (version, range, negotiate))
    if chosen > 1:
        raise ValueError("pass at most one of version, range, negotiate")
    if chosen and is_full_id(capability):
        raise ValueError(f"{capability!r} is a full id (name:version): drop the ':version' part, or the "
                         "version=/range=/negotiate= argument")
    if chosen == 0:
        ref = _uri(capability)
        if ref is not None:  # ossa:d/n@M.m carries OSSA's rule: same major, minor at least m
            return (capability, {"range": str(ref.compatible)})
        if not is_full_id(capability):
            raise ValueError("pass a full id 'name:version', or version=/range=/negotiate=")
        return capability
    if version is not None:
        return (capability, version)
    if range is not None:
        return (capability, {"range": range})
    assert negotiate is not None
    return (capability, negotiate.to_wire())


def _uri(capability: str) -> OssaRef | None:
    """The OSSA/MCP URI ``capability`` is, if it is one (``ValueError`` if malformed)."""
    try:
        return parse_ossa_uri(capability)
    except AmpError as exc:
        raise ValueError(exc.message) from None


def _sole_error(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one ordinary exception inside (possibly nested) groups, else None."""
    while len(group.exceptions) == 1 and isinstance(group.exceptions[0], BaseExceptionGroup):
        group = group.exceptions[0]
    if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
        return group.exceptions[0]
    return None


def _ms(seconds: float) -> int:
    """A timeout in seconds as wire milliseconds. ``math.inf`` (or anything
    past what the wire can say) means as long as the provider allows."""
    if not seconds > 0:  # also refuses NaN
        raise ValueError("timeout must be a positive number of seconds")
    if seconds * 1000 >= UINT64_MAX:
        return UINT64_MAX
    return max(1, int(seconds * 1000))


def _host_of(url: str) -> str:
    rest = url.split("://", 1)[-1].rsplit(":", 1)[0]
    return rest.strip("[]") or "127.0.0.1"


def _first_line(doc: str | None) -> str | None:
    return doc.strip().splitlines()[0] if doc and doc.strip() else None
