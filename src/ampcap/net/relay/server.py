"""One relay process: AMPS (and, through the HTTP front, WebSocket) links
into one :class:`~ampcap.relay.RelayCore`, its timer, and the actions it
hands back.

Why the core's calls and their actions are kept apart in time: every queue
method commits before it returns (store contract rule 8), so an action is
performed only after the call that produced it returned. A push or a
forward that then fails is told to the core (``delivery_failed``,
``forward_failed``); a crash between the commit and the effect leaves a
claim whose lease lapses, and the record is pushed again (at-least-once).

Registration is a HELLO (R24): the link's negotiated peer DID is the
principal; its Connection keeps strict principal binding, so every message
on it comes ``from`` that DID or is refused 3001 before the core sees it.
The relay pipeline has no ``recipient``: messages on these links are
addressed to others. A message addressed to the relay itself is a PING
(answered PONG) or dropped: the relay serves no capabilities.
"""

from __future__ import annotations

import logging
import os
import random as _random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ...display import shown
from ...peer.config import ConnectionConfig
from ...peer.connection import Connection, Role
from ...peer.events import ConnectionTerminated, Event, MessageReceived, Negotiated
from ...peer.outbound import Outbound, reply_to
from ...relay import (Accepted, Action, Audit, Committed, Deliver, Finalized, Forward, RelayConfig, RelayCore,
                      RelayRoutes, Reply, ReportCommit)
from ...store.relay_queue import StoreRelayQueue
from ...wire.cbor import DEFAULT_LIMITS
from ...wire.identity import DidKeyResolver, Identity, KeyResolver
from ...wire.envelope import Envelope
from ...wire.receive import ReceivePipeline, TimeVerdict, addressed_to
from ...wire.registry import MessageType
from ..transport.budget import ReceiveBudget, SendBudget
from ..transport.clock import SYSTEM_CLOCK, Clock
from ..transport.listener import Listener
from ..transport.stream import ConnectionDriver

if TYPE_CHECKING:
    from ...store.database import StateStore
    from .posting import RelayPoster

__all__ = ["RelayServer", "RelaySettings"]

log = logging.getLogger("ampcap.relay")

_PING, _PONG = int(MessageType.PING), int(MessageType.PONG)


@dataclass(frozen=True, slots=True, kw_only=True)
class RelaySettings:
    """How the relay edge runs (the core's own policy is :class:`RelayConfig`)."""

    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    max_connections: int = 10_000
    webhooks: tuple[tuple[str, str], ...] = ()
    """(DID, URL): recipients reached by webhook pushes (RFC 002 §6.3)."""
    tick_batch: int = 100
    idle_tick_s: float = 5.0
    """The longest the timer sleeps when nothing is due (``relay --workers``
    makes it short: another process may have queued for our links)."""


class _RelayPipeline(ReceivePipeline):
    """The receive checks of a relay link. A TTL=0 message means "now or
    never" (§5.1): the relay judges it by the core's rule (it lives for the
    allowed clock skew), not as expired one millisecond after its ``ts``."""

    def time_verdict(self, env: Envelope, now_ms: int) -> TimeVerdict:
        if env.ttl == 0 and env.ts < now_ms <= env.ts + self.max_skew_ms:
            return super().time_verdict(msgspec.structs.replace(env, ttl=self.max_skew_ms), now_ms)
        return super().time_verdict(env, now_ms)


def claim_owner(identity: Identity, entropy: Callable[[int], bytes] = os.urandom) -> str:
    """A claim owner unique to this process (R25): several relay processes
    may share one store, and a restarted one must not take its dead
    predecessor's claims as its own before their leases lapse."""
    return f"relay-{os.getpid()}-{entropy(6).hex()}"


class RelayServer:
    """The relay's edge: links, the timer, actions. See the module docstring."""

    def __init__(self, identity: Identity, store: StateStore, *, config: RelayConfig | None = None,
                 routes: RelayRoutes | None = None, resolver: KeyResolver | None = None,
                 settings: RelaySettings = RelaySettings(), ssl_context: ssl.SSLContext | None = None,
                 client_tls: ssl.SSLContext | None = None, clock: Clock = SYSTEM_CLOCK,
                 entropy: Callable[[int], bytes] = os.urandom, owner: str | None = None) -> None:
        self.identity = identity
        self.clock = clock
        self.entropy = entropy
        self.store = store
        self.settings = settings
        self.resolver = resolver or DidKeyResolver()
        self.core = RelayCore(config or RelayConfig(relay_did=identity.did), identity, StoreRelayQueue(store),
                              self.resolver, entropy=entropy, random=_random.SystemRandom().random, routes=routes,
                              owner=owner or claim_owner(identity, entropy))
        conn = settings.connection
        self._conn_config = replace(conn, keepalive_interval_ms=conn.keepalive_interval_ms)
        # No recipient: messages on a relay link are addressed to others. No
        # body schemas: the relay carries bodies, it does not read them
        # (the core decodes what it needs: a recipient ACK's body).
        self.pipeline = _RelayPipeline(self.resolver, limits=replace(DEFAULT_LIMITS, max_bytes=conn.max_msg_size),
                                        schemas=None, recipient=None, carry_encrypted=True)
        self.send_budget = SendBudget(64 << 20)  # DaemonConfig's defaults
        self.receive_budget = ReceiveBudget(64 << 20)
        self.listener = Listener(self._new_connection, handler=self._serve_link,
                                 max_connections=settings.max_connections, ssl_context=ssl_context,
                                 clock_ms=clock.wall_ms, send_budget=self.send_budget,
                                 receive_budget=self.receive_budget)
        self.links: dict[str, list[ConnectionDriver]] = {}
        self.webhooks = dict(settings.webhooks)
        self._client_tls = client_tls
        self._poster: RelayPoster | None = None
        self._nursery: trio.Nursery | None = None
        self._wake = trio.Event()
        self._closing = False
        self.counters = {"accepted": 0, "delivered": 0, "committed": 0, "refused": 0}
        self._registered: set[str] = set()

    # ------------------------------------------------------------ life cycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the timer (and the posts) until cancelled."""
        from .posting import RelayPoster

        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._poster = RelayPoster(self, nursery, ssl_context=self._client_tls)
            now = self.clock.wall_ms()
            for did in self.webhooks:  # a webhook is a standing live link
                self.perform(self.core.link_up(did, now))
            nursery.start_soon(self._timer)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                await self._poster.aclose()

    async def listen(self, host: str, port: int, *,
                     task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED) -> None:
        await self.listener.serve_tcp(port, host, task_status=task_status)

    @property
    def closing(self) -> bool:
        return self._closing

    def stop(self) -> None:
        """Stop accepting; GOAWAY on every link. The queue is already on disk."""
        self._closing = True
        self.listener.stop(0, "relay shutting down")

    async def _timer(self) -> None:
        while True:
            now = self.clock.wall_ms()
            self.perform(self.core.tick(now, batch=self.settings.tick_batch))
            deadline = self.core.next_deadline(self.clock.wall_ms())
            wait_s = max(0.0, (deadline - self.clock.wall_ms()) / 1000)
            self._wake = trio.Event()
            with trio.move_on_after(min(wait_s, self.settings.idle_tick_s)):
                await self._wake.wait()

    def wake(self) -> None:
        """Something changed what is due (a push failed, a forward answered)."""
        self._wake.set()

    # ------------------------------------------------------------ links (the InboundPort the HTTP front uses)

    @property
    def connection_config(self) -> ConnectionConfig:
        return self._conn_config

    def _new_connection(self) -> Connection:
        return self.server_connection()

    def server_connection(self, *, peer_did: str | None = None, **changes: Any) -> Connection:
        return Connection(role=Role.SERVER, identity=self.identity, pipeline=self.pipeline,
                          config=replace(self._conn_config, **changes), entropy=self.entropy, peer_did=peer_did)

    def driver(self, conn: Connection, stream: trio.abc.Stream) -> ConnectionDriver:
        return ConnectionDriver(conn, stream, clock_ms=self.clock.wall_ms, send_budget=self.send_budget,
                                receive_budget=self.receive_budget)

    async def serve_driver(self, driver: ConnectionDriver) -> None:
        await self._serve_link(driver)

    async def _serve_link(self, driver: ConnectionDriver) -> None:
        state: dict[str, str | None] = {"did": None}

        async def on_event(event: Event) -> None:
            self._on_event(driver, state, event)

        driver.on_event = on_event
        try:
            await driver.run()
        finally:
            did = state["did"]
            if did is not None:
                self._link_gone(did, driver)

    def _link_gone(self, did: str, driver: ConnectionDriver) -> None:
        drivers = self.links.get(did)
        if drivers is not None and driver in drivers:
            drivers.remove(driver)
            if not drivers:
                del self.links[did]
            self.core.link_down(did)
            log.info("link down %s", shown(did))

    def _on_event(self, driver: ConnectionDriver, state: dict[str, str | None], event: Event) -> None:
        now = self.clock.wall_ms()
        if type(event) is MessageReceived:
            inbound = event.inbound
            env = inbound.envelope
            if addressed_to(env.to, self.identity.did) and (not isinstance(env.to, tuple) or len(env.to) == 1):
                if env.typ == _PING:  # liveness, addressed to the relay itself
                    driver.send_nowait(reply_to(env, _PONG, None))
                return
            # The link's receive checks decoded it and verified its signature
            # (not an authcrypted one's: carried as it came, for its recipient).
            result = self.core.submit(inbound.raw, principal=state["did"], now=now, envelope=env,
                                      verified=env.enc is None)
            if result.refusal is not None:
                self.counters["refused"] += 1
                log.info("refused %s from %s: %d %s", env.id.hex(), shown(env.sender), result.refusal.code,
                         shown(result.refusal.message))
            self.perform(result.actions, reply_link=driver)
        elif type(event) is Negotiated:
            did = event.peer_did
            if did is None or state["did"] is not None:
                return
            state["did"] = did
            self.links.setdefault(did, []).append(driver)
            log.info("link up %s at %s", shown(did), self.core.owner)
            self.perform(self.core.link_up(did, now, batch=self.settings.tick_batch))
        elif type(event) is ConnectionTerminated:
            did = state["did"]
            if did is not None:
                self._link_gone(did, driver)
                state["did"] = None

    # ------------------------------------------------------------ actions

    def perform(self, actions: list[Action], *, reply_link: ConnectionDriver | None = None,
                replies: list[Reply] | None = None) -> None:
        """Perform ``actions`` in order (their call has returned: what they
        depend on is on disk). ``reply_link``: the link the message came on;
        ``replies`` collects the replies an HTTP request answers with."""
        for action in actions:
            kind = type(action)
            if kind is Deliver:
                self._deliver(action)  # type: ignore[arg-type]
            elif kind is Reply:
                assert isinstance(action, Reply)
                if replies is not None:
                    replies.append(action)
                elif reply_link is not None:
                    self._send_raw(reply_link, action.raw)
                else:
                    self._to_link(action.to, action.raw)
            elif kind is Forward or kind is ReportCommit:
                assert self._poster is not None
                self._poster.post(action)  # type: ignore[arg-type]
            elif kind is Accepted:
                assert isinstance(action, Accepted)
                self.counters["accepted"] += 1
                if log.isEnabledFor(logging.INFO):  # (its arguments cost more than the test, per message)
                    log.info("accept %s from %s seq=%s queued=%d dup=%d fwd=%d", action.msg_id.hex(),
                             shown(action.from_did), action.seq, len(action.queued), len(action.duplicates),
                             len(action.forwarded))
            elif kind is Committed:
                assert isinstance(action, Committed)
                self.counters["committed"] += 1
                if log.isEnabledFor(logging.INFO):
                    log.info("commit %s seq=%d by %s", action.msg_id.hex(), action.seq, shown(action.recipient))
            elif kind is Finalized:
                assert isinstance(action, Finalized)
                log.debug("finalized seq=%d (%s)", action.seq, action.reason)
            elif kind is Audit:
                assert isinstance(action, Audit)
                log.info("custody %s seq=%s recipient=%s code=%s %s", action.event, action.seq,
                         shown(action.recipient or "-"), action.code, shown(action.detail))

    def _deliver(self, action: Deliver) -> None:
        now = self.clock.wall_ms()
        drivers = self.links.get(action.recipient)
        if drivers:
            # The newest link first: an agent that reconnected is there.
            for driver in reversed(drivers):
                if self._send_raw(driver, action.raw):
                    self.counters["delivered"] += 1
                    if log.isEnabledFor(logging.INFO):
                        log.info("deliver seq=%s to %s (link)", action.seq, shown(action.recipient))
                    return
        url = self.webhooks.get(action.recipient)
        if url is not None and self._poster is not None:
            self._poster.webhook(action, url)
            return
        if action.seq is not None:
            self.perform(self.core.delivery_failed(action.seq, action.recipient, now))
            self.wake()

    def _to_link(self, did: str, raw: bytes) -> None:
        for driver in reversed(self.links.get(did, [])):
            if self._send_raw(driver, raw):
                return

    @staticmethod
    def _send_raw(driver: ConnectionDriver, raw: bytes) -> bool:
        try:
            driver.send_nowait(Outbound(typ=0, body=None, wire=raw))
        except Exception as exc:  # a link closing under us (LocalProtocolError) or a message too big for it
            log.debug("push failed: %s", shown(repr(exc)))
            return False
        return True

    # ------------------------------------------------------------ HTTP events (the front calls these)

    def register(self, principal: str, now: int) -> None:
        """An HTTP principal: registered once per process (the store keeps
        it; a write per request would cost a transaction each)."""
        if principal not in self._registered:
            self.core.register(principal, now)
            if len(self._registered) >= 100_000:
                self._registered.clear()  # bounded; forgetting costs one more upsert
            self._registered.add(principal)

    def http_submit(self, raw: bytes, principal: str) -> tuple[list[Reply], int | None]:
        """A POSTed message: (the replies for the submitter, the refusal code)."""
        now = self.clock.wall_ms()
        self.register(principal, now)
        result = self.core.submit(raw, principal=principal, now=now)
        if result.refusal is not None:
            self.counters["refused"] += 1
            log.info("refused a POST from %s (type %s): %d %s", shown(principal),
                     result.envelope.typ if result.envelope is not None else "-", result.refusal.code,
                     shown(result.refusal.message))
        replies: list[Reply] = []
        self.perform(result.actions, replies=replies)
        return replies, result.refusal.code if result.refusal is not None else None
