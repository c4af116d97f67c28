"""The daemon: every sans-I/O piece of ampcap composed over trio.

One :class:`Daemon` owns

* a :class:`~ampcap.net.transport.listener.Listener` (inbound connections) and any
  connections it dials itself (:meth:`Daemon.connect`); each connection is a
  :class:`~ampcap.net.transport.stream.ConnectionDriver` with its own tasks, so a slow
  or silent peer never stalls another;
* ONE :class:`~ampcap.peer.executor.Executor` (provider side; a retry may
  arrive on another connection than the original) and ONE
  :class:`~ampcap.peer.invoker.Invoker` (requester side). Both connection
  roles carry both directions: a client that declared capabilities can be
  invoked by the server it dialled;
* the executor's running jobs (:class:`~ampcap.net.daemon.jobs.Jobs`: one trio task
  each, cancelled through their scope) and the invoker's calls our own
  callers wait on (:class:`~ampcap.net.daemon.calls.Calls`);
* ONE timer task armed from ``executor.get_timer()`` / ``invoker.get_timer()``.

The core returns *actions*; :meth:`Daemon._apply` is the only place that
turns them into effects. Logging: one line per connection opened/closed and
per invoke received/completed (id, capability, code, latency), through
stdlib ``logging`` under ``ampcap.daemon``.

Shutdown (:meth:`Daemon.drain`): GOAWAY everywhere (new work is refused with
5002 by the connections themselves), wait for running jobs up to the drain
timeout, end whatever still runs with its one terminal CAP_RESULT
(``executor.shutdown``), fail our own pending calls locally, flush, close.

This module keeps the core: construction, the run loop and drain, the
links' life, applying actions and the timers. What grew around it lives
beside it, each handed only what it needs: ``dispatch.py`` (where each
connection event and inbound message goes; a base class of
:class:`Daemon`), ``link.py`` (:class:`Link`), ``serving.py`` (the serving
half: executor, jobs, RFC 005 verifier, state store; imported only when
built), ``actionlog.py`` (``Log`` and ``Audit`` lines), and outside this
folder ``net/transport/dial.py`` (URL to stream) and the features in
``net/features/``: ``forwarding_relay.py`` (a Rust-example relay and its probe),
``session_routing.py`` (RFC 006 checks between the dispatch and the session
parts) and ``delegation.py`` (DELEG_* answers, the R20 revocation
refresher). Those receive the daemon as one of the narrow ports of
``ports.py``, never as :class:`Daemon`.
"""

from __future__ import annotations

import logging
import os
import random
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from ...caps.catalog import Catalog
from ...display import MESSAGE_LIMIT, shown
from ...errors import AmpError, LocalProtocolError, MessageTooLarge
from ...schema import load_schemas
from ...peer.config import RELAY_DID, ConnectionConfig
from ...peer.connection import Connection, Role
from ...peer.events import MessageReceived
from ...peer.invoker import Invoker
from ...peer.logthrottle import LogThrottle
from ...peer.outbound import Log, Outbound, Send, stand_in_for_oversize
from ...peer.policy import ALLOW_ALL, Policy
from ...peer.sealing import Sealer
from ...wire.cbor import DEFAULT_LIMITS
from ...wire.extensions import TRACE
from ...wire.frames import Framing
from ...wire.identity import DidKeyResolver, Identity, KeyResolver
from ...wire.receive import ReceivePipeline
from ..features import delegation, forwarding_relay, relay_agent
from ..features.session_routing import SessionRouting
from ..transport.budget import ReceiveBudget, SendBudget
from ..transport.clock import SYSTEM_CLOCK, Clock, to_trio_deadline
from ..transport.dial import dial, not_opened
from ..transport.listener import OVERLOADED_FRAME, Listener
from ..transport.sink import ReplySink
from ..transport.stream import ConnectionDriver
from ..transport.url import AmpUrl
from .actionlog import ActionLog
from .calls import Calls
from .config import DaemonConfig
from .dispatch import InboundDispatch
from .link import Link, peer_label

if TYPE_CHECKING:
    from ...deleg.chain import ChainVerifier
    from ...deleg.revocation import StatusCache
    from ...deleg.service import DelegationService
    from ...peer.executor import Executor
    from ...store import StateStore
    from ...store.delegation import DelegationStore
    from .durable import DurableState
    from .jobs import Jobs, LocalHandler
    from .serving import ServingHalf

__all__ = ["DaemonConfig", "Daemon", "Link", "LocalHandler"]

# The serving half (executor, jobs, delegation verifier, state store) is
# imported and built on first need (issue 26): a client-only daemon never
# loads it. These are its action classes once it is loaded; None before, when
# no such action can exist (only the executor makes them).
_Execute: Any = None
_Cancel: Any = None
_Audit: Any = None
_FetchStatus: Any = None


def _holds_nothing(actions: list[Any]) -> bool:
    return False


def __getattr__(name: str) -> Any:
    if name == "LocalHandler":  # re-exported; lives with the jobs it runs
        from .jobs import LocalHandler
        return LocalHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


log = logging.getLogger("ampcap.daemon")

_ALL_ANSWERED = "the peer finished sending and every invoke was answered"  # why a half-closed link closes


class Daemon(InboundDispatch):
    """Listener + connections + executor + invoker + jobs + calls + timers.

    Use inside a nursery: ``async with daemon.running(): ...`` (or ``run``).
    """

    def __init__(self, identity: Identity, catalog: Catalog, *, config: DaemonConfig = DaemonConfig(),
                 policy: Policy = ALLOW_ALL, params: Any = None, resolver: KeyResolver | None = None,
                 handlers: Mapping[str, LocalHandler] | None = None, clock: Clock = SYSTEM_CLOCK,
                 entropy: Callable[[int], bytes] = os.urandom, ssl_context: ssl.SSLContext | None = None,
                 decrypt_with: Sequence[bytes] = (), store: StateStore | None = None) -> None:
        """``decrypt_with``: X25519 secrets besides our own to open authcrypt
        messages with (a keyring's, for DIDs this daemon answers for)."""
        self.identity = identity
        self.catalog = catalog
        self.config = config
        self.clock = clock
        self._entropy = entropy
        # One pipeline (so one replay cache) for every connection: a message
        # replayed on another connection is still recognised.
        # Every body is checked against its CDDL rule before anything acts on
        # it (1001 for shape faults, 4001 for R6 identity conflicts).
        # Messages must name our DID in ``to`` (no rerouting), and may be as
        # large as the maximum we offer in the RFC 002 handshake.
        # Authcrypt messages to us are opened with our key agreement key (RFC
        # 001 §8.2: decrypt, then verify), and with any other given.
        resolver = resolver or DidKeyResolver()
        self.pipeline = ReceivePipeline(resolver, profile=config.profile,
                                        decrypt_with=[identity.x25519_secret, *decrypt_with],
                                        schemas=load_schemas(), recipient=identity.did,
                                        limits=replace(DEFAULT_LIMITS, max_bytes=config.connection.max_msg_size))
        self._serving_args = (resolver or DidKeyResolver(), params, policy, dict(handlers or {}),
                              Sealer(identity, entropy, resolver, default_ttl_ms=config.connection.default_ttl_ms,
                                     profile=config.connection.profile))
        self._executor: Executor | None = None
        self._jobs: Jobs | None = None
        self._store = store
        self._serving: ServingHalf | None = None
        self.durable: DurableState | None = None
        self._read_ahead: Any = None  # the durable state's ReadAhead (PostgreSQL), for _on_event
        self._holds: Callable[[list[Any]], bool] = _holds_nothing
        self._log_throttle = LogThrottle()
        # R20: with a revocation publisher, stale statuses are asked about.
        self._refresher = (delegation.RevocationRefresher(self, config.revocation_publisher,
                                                          config.revocation_publisher_did,
                                                          config.revocation_query_timeout_s)
                           if config.revocation_publisher is not None else None)
        self._lines = ActionLog(clock, self._log_throttle, self._refresher.kick if self._refresher else None)
        # RFC 006 provider (sessions other agents open with us), the
        # session-scoped calls we make ourselves (provisional correlation) and
        # our session-control requests awaiting their answer.
        self._session_routing = SessionRouting(catalog, policy, entropy, config.connection.default_ttl_ms,
                                               self._send, delegation_fresh=self._delegation_fresh)
        self.sessions = self._session_routing.provider
        self.session_calls = self._session_routing.calls
        self.controls = self._session_routing.controls
        rng = random.Random(entropy(16))
        self.invoker = Invoker(config.invoker, lambda: rng.uniform(0.5, 1.0), entropy)
        self.calls = Calls(self.invoker, clock, self._rearm)
        self._acks_after_replies = relay_agent.AcksAfterReplies()
        # The connection must outlive our drain period, or it would close by itself first.
        drain_ms = int(config.drain_timeout_s * 1000) + 5_000
        # The daemon closes a half-closed connection itself once it owes nothing.
        self._conn_config = replace(config.connection, drain_on_half_close=True,
                                    drain_timeout_ms=max(config.connection.drain_timeout_ms, drain_ms))
        self.send_budget = SendBudget(config.max_send_buffer_total)
        self.receive_budget = ReceiveBudget(config.max_receive_buffer_total)
        self.listener = Listener(self._new_server_connection, handler=self._serve_link,
                                 max_connections=config.max_connections, ssl_context=ssl_context,
                                 clock_ms=clock.wall_ms, send_budget=self.send_budget,
                                 receive_budget=self.receive_budget,
                                 refusal=None if config.connection.framing is Framing.RAW else OVERLOADED_FRAME)
        self.links: set[Link] = set()
        self.observe: Callable[[list[Any]], None] | None = None  # sees every action list as it takes effect
        self.metrics: Any = None  # serve --metrics: the DaemonMetrics whose sampling task runs with the daemon
        self.tracing: Any = None  # traced_by(): net/features/tracing.py's DaemonTracing
        self._half_closed: set[Link] = set()  # peers that finished sending; closed once answered
        self._nursery: trio.Nursery | None = None
        self._timer_kick = trio.Event()
        self._armed: int | None = None
        self._closing = False
        self._hurried = False  # hurry(): the drain stops waiting for running invokes
        self._drain_wait: trio.CancelScope | None = None
        # Anything that serves, keeps state or must refresh revocations builds
        # the serving half now; a client-only daemon (empty catalog, no store,
        # no handlers) on the first message that needs it.
        if store is not None or handlers or catalog.specs or config.revocation_publisher is not None:
            self._serve_half()

    def _serve_half(self) -> Executor:
        """Build (once) the provider side (net/daemon/serving.py): the state store
        (R19), the RFC 005 credential store, verifier and service, the
        executor and its jobs. Imported here, not above: a client-only daemon
        never loads it."""
        if self._executor is not None:
            return self._executor
        global _Execute, _Cancel, _Audit, _FetchStatus
        from .serving import ACTION_CLASSES, ServingHalf

        key_resolver, params, policy, handlers, sealer = self._serving_args
        half = ServingHalf(identity=self.identity, catalog=self.catalog, config=self.config, clock=self.clock,
                           sessions=self.sessions, store=self._store, key_resolver=key_resolver, params=params,
                           policy=policy, handlers=handlers, sealer=sealer, apply=self._apply,
                           throttle=self._log_throttle)
        _Execute, _Cancel, _Audit, _FetchStatus = ACTION_CLASSES
        self._serving, self._store = half, half.store
        if half.durable is not None and half.holds is not None:
            self.durable, self._holds = half.durable, half.holds
            self._read_ahead = half.durable.read_ahead
        self._jobs = half.jobs
        self._jobs.nursery = self._nursery
        if self.tracing is not None:
            self._jobs.entering = self.tracing.entering
        self._executor = half.executor
        return half.executor

    def traced_by(self, tracing: Any) -> None:
        """Trace invokes both ways with ``tracing`` (a
        :class:`~ampcap.net.features.tracing.DaemonTracing`; ``serve --trace``,
        ``Peer(tracing=...)``): spans for what we serve and what we call, and
        ``ampcap.trace`` offered in HELLO on the connections made from now on,
        so that peers that trace too carry the trace context in ``ext``."""
        self.tracing = self.calls.tracing = tracing
        offered = self._conn_config.extensions
        if TRACE not in offered:
            self._conn_config = replace(self._conn_config, extensions=(*offered, TRACE))
        previous = self.observe
        self.observe = tracing.observe if previous is None else _both(previous, tracing.observe)
        if self._jobs is not None:
            self._jobs.entering = tracing.entering

    def _served(self) -> ServingHalf:
        self._serve_half()
        assert self._serving is not None
        return self._serving

    # The serving half, built on first use (see _serve_half).
    @property
    def executor(self) -> Executor:
        return self._serve_half()

    @property
    def jobs(self) -> Jobs:
        return self._served().jobs

    @property
    def store(self) -> StateStore:
        return self._served().store

    @property
    def delegations(self) -> DelegationStore:
        return self._served().delegations

    @property
    def revocation_status(self) -> StatusCache:
        return self._served().revocation_status

    @property
    def verifier(self) -> ChainVerifier:
        return self._served().verifier

    @property
    def deleg_service(self) -> DelegationService:
        return self._served().deleg_service

    def _delegation_fresh(self, entry: Any, now: int) -> None:
        """RFC 006 §7.3 on resume: each credential a cached delegation
        fingerprint names is checked against the revocation store and the
        publisher's status (3004 revoked, 5002 no fresh status in strict mode)."""
        links = entry.get("links")
        if type(links) is not list or not links:
            raise AmpError(5002, "a cached delegation cannot be re-checked here")
        checker = self._served().verifier.revocations
        for link in links:
            checker.check_key((link[0], link[1]), now)

    def _noting_delegation(self, actions: list[Any], now: int) -> list[Any]:
        """A session-scoped invoke that starts on a delegation chain: the
        session caches the chain's fingerprint (re-checked on resume, §7.3)."""
        for action in actions:
            if type(action) is _Execute and action.job.delegation_links and action.job.session is not None:
                sid = action.job.session.get("session_id")
                if type(sid) is bytes:
                    actions = actions + self.sessions.note_delegation(sid, action.job.delegation_links, now)
        return actions

    def _stale_session_links(self, inbound: Any, now: int) -> list[tuple[str, str]]:
        if self._refresher is None or self._executor is None:
            return []
        cache = self.revocation_status
        return self._session_routing.stale_links(inbound, lambda key: cache.get(key, now) is not None)

    def _ask_then_control(self, link: Link, inbound: Any, keys: list[tuple[str, str]]) -> None:
        """Handle the session control ``inbound`` once the publisher was asked about ``keys``."""
        assert self._nursery is not None and self._refresher is not None
        self._nursery.start_soon(self._control_after_asking, link, inbound, keys)

    async def _control_after_asking(self, link: Link, inbound: Any, keys: list[tuple[str, str]]) -> None:
        assert self._refresher is not None
        await self._refresher.ask_now(keys)
        self._apply(self.sessions.handle(inbound, link, self.clock.wall_ms()))

    def status_settled(self, key: tuple[str, str]) -> None:
        """The publisher was asked about ``key`` (answered or not): decide
        the invokes that waited for it (peer/status_wait.py)."""
        if self._executor is not None:
            now = self.clock.wall_ms()
            self._apply(self._noting_delegation(self._executor.status_settled(key, now), now))

    # ================================================================ life

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled: the timer task plus every connection's tasks."""
        async with trio.open_nursery() as nursery:
            # Jobs and async on_progress callbacks run as our tasks too: they
            # end with the daemon, not with the connection that started them.
            self._nursery = self.calls.nursery = nursery
            nursery.start_soon(self._timer_loop)
            if self._serving is not None:
                await self._serving.start(nursery, self.catalog)
            if self._refresher is not None:
                nursery.start_soon(self._refresher.run)
            if self.durable is not None:
                nursery.start_soon(self.durable.run)
            task_status.started(self)
            await trio.sleep_forever()

    async def listen(self, host: str, port: int) -> list[trio.SocketListener]:
        """Start accepting on ``host:port`` (0 = a free port); returns the bound listeners."""
        assert self._nursery is not None, "start the daemon first"
        listeners: list[trio.SocketListener] = await self._nursery.start(
            lambda task_status: self.listener.serve_tcp(port, host, task_status=task_status))
        return listeners

    @property
    def closing(self) -> bool:
        """Draining or drained (:meth:`drain` has begun)."""
        return self._closing

    def hurry(self) -> None:
        """Stop waiting for running invokes in :meth:`drain` (now or when it
        starts): they end at once with the shutdown code (5002)."""
        self._hurried = True
        if self._drain_wait is not None:
            self._drain_wait.cancel()

    async def drain(self, timeout_s: float | None = None) -> None:
        """Graceful stop (see the module docstring). Idempotent."""
        if self._closing:
            return
        self._closing = True
        self.calls.refuse_new()
        timeout = self.config.drain_timeout_s if timeout_s is None else timeout_s
        serving, executor = self._serving, self._executor
        running = (lambda: executor.running) if executor is not None else (lambda: 0)
        log.info("draining: invokes_running=%d connections=%d timeout=%gs", running(), len(self.links), timeout)
        self.listener.stop(0, "server shutting down")
        for link in list(self.links):
            if link.outbound:
                link.driver.start_drain(0, "shutting down")
        with trio.move_on_after(timeout) as waiting:
            self._drain_wait = waiting
            if self._hurried:
                waiting.cancel()
            while running():
                await trio.sleep(0.01)
        self._drain_wait = None
        if serving is not None:
            serving.end_running(self.clock.wall_ms(), timeout_s=timeout, hurried=self._hurried)
        self.calls.end_all()
        if self._serving is not None:  # built meanwhile, too
            await self._serving.close()
        for link in list(self.links):
            link.driver.close()
        with trio.move_on_after(5):
            for link in list(self.links):
                await link.driver.closed.wait()

    # =========================================================== connections

    def _new_server_connection(self) -> Connection:
        return Connection(role=Role.SERVER, identity=self.identity, pipeline=self.pipeline,
                          config=self._conn_config, entropy=self._entropy)

    async def _serve_link(self, driver: ConnectionDriver) -> None:
        await self._run_link(Link(driver=driver, outbound=False))

    async def _run_link(self, link: Link) -> None:
        link.opened_ms = self.clock.monotonic_ms()
        link.driver.on_event = lambda event: self._on_event(link, event)
        self.links.add(link)
        try:
            await link.driver.run()
        except Exception as exc:
            # Bad input is answered with AMP errors, never an exception, so this
            # is a bug of ours. It costs this one connection, not the daemon and
            # every other connection with it.
            log.error("connection %s peer=%s failed on an internal error (a bug, please report it): %s",
                      "to" if link.outbound else "from", peer_label(link), shown(_innermost(exc), MESSAGE_LIMIT))
            log.debug("internal error on a connection", exc_info=exc)
            link.driver.conn.close()
        finally:
            self.links.discard(link)
            link.ready.set()
            self._link_gone(link)

    async def join_relay(self, url: str | AmpUrl, *, relay_did: str = RELAY_DID, timeout_s: float = 10.0,
                         ssl_context: ssl.SSLContext | None = None, probe_s: float | None = None) -> Link:
        """Dial a relay like the public Rust example's and register there
        (net/features/forwarding_relay.py says how such a relay behaves and what the link to it
        needs). With ``probe_s``, every ``probe_s`` seconds a PING addressed
        to ourselves checks that the relay still forwards to this link; when
        it does not come back the link is closed, so whoever keeps it
        (``serve --relay``) dials again and registers anew."""
        link = await forwarding_relay.register(self, url, relay_did=relay_did, timeout_s=timeout_s, ssl_context=ssl_context)
        if probe_s is not None:
            link.relay_probe = trio.Event()
            assert self._nursery is not None
            self._nursery.start_soon(forwarding_relay.watch, link, str(url), probe_s, self.identity.did, self._send,
                                     lambda: self._closing)
        return link

    async def connect(self, url: str | AmpUrl, *, peer_did: str | None = None,
                      ssl_context: ssl.SSLContext | None = None, timeout_s: float = 10.0,
                      config: ConnectionConfig | None = None) -> Link:
        """Dial ``url`` and negotiate; ``AmpError`` if that fails (5003 on timeout,
        :class:`~ampcap.errors.Unreachable` when nothing answers).
        ``config`` replaces the daemon's connection settings for this link."""
        assert self._nursery is not None, "start the daemon first"
        return await dial(self, url, peer_did=peer_did, ssl_context=ssl_context, timeout_s=timeout_s, config=config)

    async def serve_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one already-open stream (any transport: a memory stream in
        tests, a socket accepted elsewhere) until the connection ends."""
        driver = self._driver(self._new_server_connection(), stream)
        await self._serve_link(driver)

    @property
    def entropy(self) -> Callable[[int], bytes]:
        """The daemon's source of randomness (message ids, token ids)."""
        return self._entropy

    @property
    def connection_config(self) -> ConnectionConfig:
        """The settings every connection of this daemon starts from."""
        return self._conn_config

    def server_connection(self, *, peer_did: str | None = None, **changes: Any) -> Connection:
        """A server-side Connection with this daemon's settings and ``changes``
        (the WebSocket binding runs one in its message mode); ``peer_did`` is
        the principal a bearer token already proved (3001 if HELLO differs)."""
        return Connection(role=Role.SERVER, identity=self.identity, pipeline=self.pipeline,
                          config=replace(self._conn_config, **changes), entropy=self._entropy, peer_did=peer_did)

    def driver(self, conn: Connection, stream: trio.abc.Stream) -> ConnectionDriver:
        """The driver for ``conn`` over ``stream``, sharing this daemon's budgets."""
        return self._driver(conn, stream)

    async def serve_driver(self, driver: ConnectionDriver) -> None:
        """Serve an inbound connection built with :meth:`driver` until it ends."""
        await self._serve_link(driver)

    def deliver(self, sink: ReplySink, inbound: Any) -> None:
        """Act on one message that arrived without a connection (an HTTP POST,
        already checked by :attr:`pipeline`): replies go to ``sink``."""
        self._on_message(sink, MessageReceived(inbound=inbound))  # type: ignore[arg-type]

    def _driver(self, conn: Connection, stream: trio.abc.Stream) -> ConnectionDriver:
        return ConnectionDriver(conn, stream, clock_ms=self.clock.wall_ms, send_budget=self.send_budget,
                                receive_budget=self.receive_budget)

    async def connect_stream(self, stream: trio.abc.Stream, *, peer_did: str | None = None,
                             timeout_s: float = 10.0, config: ConnectionConfig | None = None) -> Link:
        """Like :meth:`connect` over an already-open stream."""
        assert self._nursery is not None, "start the daemon first"
        conn = Connection(role=Role.CLIENT, identity=self.identity, pipeline=self.pipeline,
                          config=config or self._conn_config, entropy=self._entropy, peer_did=peer_did)
        link = Link(driver=self._driver(conn, stream), outbound=True, relay_acks=conn.config.relay_acks)
        self._nursery.start_soon(self._run_link, link)
        with trio.move_on_after(timeout_s) as waited:
            await link.ready.wait()
        if not link.open:
            term = link.driver.terminated
            link.driver.close()
            raise not_opened(conn, term, timeout_s, waited.cancelled_caught)
        return link

    def _link_gone(self, link: Link) -> None:
        self.controls.end_on(link)
        if self._executor is not None:
            self._executor.connection_closed(link)
        self._half_closed.discard(link)
        self.calls.end_on(link)

    async def session_control(self, link: Link, out: Outbound, *, timeout_s: float = 30.0) -> Any:
        """Send an RFC 006 control REQUEST on ``link`` and wait for its
        RESPONSE; return its body. An ERROR answer raises its AmpError; no
        answer in time is 5003, a lost connection 5002."""
        return await self._session_routing.control(link, out, self.clock.wall_ms(), timeout_s)

    def _close_answered(self) -> None:
        """Close the half-closed links that nothing is owed on any more."""
        for link in [link for link in self._half_closed if not self.executor.owes(link)]:
            self._half_closed.discard(link)
            link.driver.close(_ALL_ANSWERED)

    # =============================================================== actions

    def _send(self, link: Any, out: Outbound) -> None:
        if isinstance(link, Link):
            target: ConnectionDriver | ReplySink = link.driver
        elif isinstance(link, ReplySink):  # replies to an HTTP POST: the principal's mailbox
            target = link
        else:
            return
        try:
            target.send_nowait(out)
            if link.relay_acks and out.reply_to is not None:
                ack = self._acks_after_replies.after(out)
                if ack is not None:
                    target.send_nowait(ack)
        except MessageTooLarge as exc:
            # The caller must still get its one terminal reply: a small one stands in.
            stand_in = stand_in_for_oversize(out, exc.size, exc.limit)
            log.warning("reply to %s not sent: %s%s", out.reply_to.hex() if out.reply_to else "-", exc.message,
                        "; sent a 5001 in its place" if stand_in is not None else "")
            if stand_in is not None:
                self._send(link, stand_in)
        except LocalProtocolError as exc:  # closed meanwhile, or draining and not a reply
            log.debug("not sent to %s: %s", peer_label(link), shown(exc, MESSAGE_LIMIT))

    def _apply(self, actions: list[Any]) -> None:
        if self.durable is not None and self._holds(actions):
            self.durable.hold(actions)
            return
        if self.observe is not None:  # serve --metrics (net/daemon/metrics.py)
            self.observe(actions)
        for action in actions:
            kind = type(action)
            if kind is Send:
                self._send(action.conn, action.out)
            elif kind is _Execute:  # only an executor makes these: the jobs exist
                self._jobs.start(action.job)  # type: ignore[union-attr]
            elif kind is _Cancel:
                self._jobs.cancel(action.key, action.code)  # type: ignore[union-attr]
            elif kind is Log:
                self._lines.log(action)
            elif kind is _Audit:
                self._lines.audit(action)
            elif kind is _FetchStatus:  # a delegated invoke waits for the publisher (R20)
                assert self._refresher is not None
                self._refresher.fetch(action.keys)
        if self._half_closed:
            self._close_answered()
        self._rearm()

    def _apply_invoker(self, actions: list[Any]) -> None:
        for action in actions:
            kind = type(action)
            if kind is Send:
                self._send(action.conn, action.out)
            elif kind is Log:
                self._lines.log(action)
            else:  # an outcome: the caller waiting on the call hears it
                self.calls.settle(action)
        self._rearm()

    # ================================================================ timers

    def _rearm(self) -> None:
        executor = self._executor
        deadline = _earliest(_earliest(executor.get_timer() if executor is not None else None,
                                       self.invoker.get_timer()), self.sessions.get_timer())
        if deadline is not None and (self._armed is None or deadline < self._armed):
            self._timer_kick.set()

    async def _timer_loop(self) -> None:
        while True:
            self._timer_kick = trio.Event()
            executor = self._executor
            self._armed = _earliest(_earliest(executor.get_timer() if executor is not None else None,
                                              self.invoker.get_timer()), self.sessions.get_timer())
            with trio.move_on_at(to_trio_deadline(self._armed, self.clock.wall_ms)):
                await self._timer_kick.wait()
                continue
            now = self.clock.wall_ms()
            self._armed = None
            if executor is not None:
                self._apply(executor.handle_timer(now))
            self._apply_invoker(self.invoker.handle_timer(now))
            self._apply(self.sessions.handle_timer(now))

def _both(first: Callable[[list[Any]], None], second: Callable[[list[Any]], None]) -> Callable[[list[Any]], None]:
    """Two observers of the action stream (metrics and tracing), in order."""
    def observe(actions: list[Any]) -> None:
        first(actions)
        second(actions)
    return observe


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None or a < b else b


def _innermost(exc: BaseException) -> str:
    """``Type: message`` of the exception a task raised, out of trio's groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"

