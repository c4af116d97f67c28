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

This module keeps the peer itself (its identity, policy and daemon, serving
and connecting), :class:`Server` and :func:`connect`. Beside it:
``net/api/remote.py`` (:class:`Remote`, the caller's handle on one connection,
with :class:`Negotiate` and :class:`QueryResult`) and
``net/api/local_capabilities.py`` (the ``capability`` decorator's machinery:
schemas from type hints, registration checks, the handler adapter). Every
public name is re-exported here.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ...caps.catalog import Catalog
from ...files.identity import load_or_create
from ...peer.policy import ALLOW_ALL, Policy
from ...wire.identity import Identity, KeyResolver
from ..transport.clock import SYSTEM_CLOCK, Clock
from ..daemon.core import RELAY_DID, Daemon, DaemonConfig
from .local_capabilities import F, LocalCapabilities
from .local_capabilities import InvocationContext as InvocationContext
from .local_capabilities import capability as capability
from .local_capabilities import schema_from_signature as schema_from_signature
from .remote import InputCallback as InputCallback
from .remote import Negotiate as Negotiate
from .remote import ProgressCallback as ProgressCallback
from .remote import QueryResult as QueryResult
from .remote import Remote as Remote
from ..transport.url import AmpUrl, parse_url

if TYPE_CHECKING:
    from ...caps.manifest import Manifest
    from ...store.database import StateStore

# The manifest model, its loaders and the JSON Schema compilers are imported
# where capabilities are offered: a caller (`ampcap invoke`, `ampcap.connect`)
# never needs them, and they are a good part of a one-shot command's start-up.

__all__ = ["Peer", "Remote", "Server", "Negotiate", "QueryResult", "InvocationContext", "capability", "connect"]


def _load_identity(identity: Identity | str | os.PathLike[str] | None) -> Identity:
    if isinstance(identity, Identity):
        return identity
    return load_or_create(identity, os.urandom)[0]


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
        (``ampcap.net.transport.tls.server_context(cert, key)``); without it the peer
        serves plain ``amp://`` only.
    :param tracing: OpenTelemetry spans for every invoke served and made
        (the ``ampcap[tracing]`` extra; ``docs/scaling.md``): an
        OpenTelemetry ``TracerProvider``, or ``True`` for the global one
        (``opentelemetry.trace.get_tracer_provider()``); ``None`` (the
        default) traces nothing and imports nothing of OpenTelemetry.
    """

    def __init__(self, identity: Identity | str | os.PathLike[str] | None = None, *,
                 policy: Policy | str | os.PathLike[str] = ALLOW_ALL, resolver: KeyResolver | None = None,
                 config: DaemonConfig = DaemonConfig(), clock: Clock = SYSTEM_CLOCK,
                 manifest: Manifest | str | os.PathLike[str] | None = None,
                 tls: ssl.SSLContext | None = None, store: StateStore | None = None, tracing: Any = None) -> None:
        self.identity = _load_identity(identity)
        self.tracing = tracing
        self.tls = tls
        # Durable state (R19): StateStore.open(directory) keeps the invoke
        # journal across restarts; None keeps everything in memory.
        self.store = store
        # Files are read now, so a mistake in one fails here, not at serve().
        if isinstance(policy, (str, os.PathLike)):
            from ...files.policy import load_policy

            policy = load_policy(policy)
        self.policy = policy
        if isinstance(manifest, (str, os.PathLike)):
            from ...files.manifest import load_manifest

            manifest = load_manifest(manifest, check_bindings=True)
        self.resolver = resolver
        self.config = config
        self.clock = clock
        self._manifest = manifest
        self._capabilities = LocalCapabilities()
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
            self._capabilities.register(fn, name, version, schema=schema, output_schema=output_schema, notes=notes,
                                        aliases=aliases, idempotent=idempotent)
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
        specs, bundles, handlers = self._capabilities.served()
        if self._manifest is not None:
            specs.extend(self._manifest.capabilities)
            bundles.append(self._manifest.bundle)
        from ...caps.bundle import SchemaStore
        from ...caps.params import ParamsValidator

        store = SchemaStore(bundles, offline=True)
        service: list[Any] = []
        if specs:  # a pure caller loads none of it
            from ...caps.artifacts import artifact_service

            service, service_handlers = artifact_service(specs, store)  # our schemas, handed out by hash
            handlers = {**handlers, **service_handlers}
        catalog = Catalog(specs + service, cursor_key=os.urandom(32))
        daemon = Daemon(self.identity, catalog, config=self.config, policy=self.policy,
                        params=ParamsValidator(store), resolver=self.resolver,
                        handlers=handlers, clock=self.clock, ssl_context=self.tls, store=self.store)
        if self.tracing is not None and self.tracing is not False:
            from ..features.tracing import trace_daemon  # OpenTelemetry only for a peer that traces

            trace_daemon(daemon, None if self.tracing is True else self.tracing)
        return daemon

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
            raise ValueError("serving amps:// needs Peer(tls=ampcap.net.transport.tls.server_context(cert, key))" if tls
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
                      ssl_context: ssl.SSLContext | None = None, relay_profile: str = "auto") -> AsyncIterator[Remote]:
        """Open a connection to ``url`` for the duration of the block.

        ``url`` is ``amp(s)://``, ``https://``/``http://`` (RFC 002 §6: POST
        and polling) or ``wss://``/``ws://`` (§5), or several endpoints of
        the peer separated by commas, tried in the order ``amps > wss > https``.

        ``peer_did`` pins whom we expect to reach (3001 if someone else answers).
        With ``relay_to``, ``url`` is a relay: this peer registers there and
        every call is addressed to ``relay_to``. ``relay_profile``
        ``"rfc003"`` (an RFC 003 relay such as ``ampcap relay``: HELLO
        registers, replies are acknowledged) or ``"rust-example"`` (one like
        the public Rust example's); ``"auto"``: rfc003 when ``relay_did`` is
        not the example's.
        ``ssl_context`` verifies an ``amps://`` server (default: the system
        trust store; ``ampcap.net.transport.tls.client_context(ca_file=...)`` for a
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
            if relay_to is not None and (relay_profile == "rfc003" or
                                         (relay_profile == "auto" and relay_did != RELAY_DID)):
                from ..features import relay_agent

                link = await relay_agent.join(daemon, url, relay_did=None if relay_did == RELAY_DID else relay_did,
                                              timeout_s=timeout, ssl_context=ssl_context)
            elif relay_to is not None:
                link = await daemon.join_relay(url, relay_did=relay_did, timeout_s=timeout, ssl_context=ssl_context)
            else:
                link = await daemon.connect(url, peer_did=peer_did, timeout_s=timeout, ssl_context=ssl_context)
                if link.peer_did == self.did:  # its HELLO named our own DID: no request goes out
                    link.driver.close()
                    raise CallsItself(self.did)
            remote = Remote(daemon, link, to=relay_to, url=None if relay_to is not None else url,
                            ssl_context=ssl_context)
            try:
                yield remote
            finally:
                remote._closed = True
                link = remote._link  # the one it redialled, if the first was lost
                if link.relay_acks and link.receipts_owed > 0:
                    from ..features.relay_agent import RECEIPT_GRACE_S

                    with trio.CancelScope(shield=True), trio.move_on_after(RECEIPT_GRACE_S):
                        while link.receipts_owed > 0 and link.open:
                            await trio.sleep(0.005)
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


@asynccontextmanager
async def connect(url: str, *, identity: Identity | str | os.PathLike[str] | None = None,
                  peer_did: str | None = None, timeout: float = 10.0,
                  config: DaemonConfig = DaemonConfig(), relay_to: str | None = None,
                  relay_did: str = RELAY_DID, ssl_context: ssl.SSLContext | None = None,
                  tracing: Any = None) -> AsyncIterator[Remote]:
    """Connect to ``url`` as a peer that offers no capabilities (a pure
    caller); ``relay_to`` and ``ssl_context`` as in :meth:`Peer.connect`,
    ``tracing`` as in :class:`Peer`.
    ``identity`` None is the callers' default key file (``caller.json``,
    created if missing), apart from the one a local daemon serves with."""
    caller = identity if identity is not None else load_or_create(None, os.urandom, caller=True)[0]
    async with Peer(caller, config=config, tracing=tracing).connect(url, peer_did=peer_did, timeout=timeout,
                                                     relay_to=relay_to, relay_did=relay_did,
                                                     ssl_context=ssl_context) as remote:
        yield remote


def _sole_error(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one ordinary exception inside (possibly nested) groups, else None."""
    while len(group.exceptions) == 1 and isinstance(group.exceptions[0], BaseExceptionGroup):
        group = group.exceptions[0]
    if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
        return group.exceptions[0]
    return None


def _host_of(url: str) -> str:
    rest = url.split("://", 1)[-1].rsplit(":", 1)[0]
    return rest.strip("[]") or "127.0.0.1"
