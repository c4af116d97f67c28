"""The gateway's AMP side: one :class:`PeerLink` per peer, kept alive.

A link dials its peer through the Python API (:meth:`ampcap.net.api.peer.Peer.connect`,
so every transport the URL dialer learns comes for free), lists the peer's
capabilities with CAP_QUERY over all pages, and keeps the connection open.
When the connection is lost it redials with exponential back-off (0.5 s
doubling to 30 s, with jitter), and while it is down :attr:`PeerLink.remote`
is ``None``. A tools/call that finds it down asks for a redial at once
(:meth:`PeerLink.redial_now`, at most one dial per ``REDIAL_MIN_S``) and waits
up to ``CALLER_WAIT_S`` for it; while callers keep asking (``CALLERS_RECENT_S``)
the back-off stays at most ``CALLER_BACKOFF_S``. So the first call after a
peer comes back finds it within about a second, however long it was away,
and a peer that stays down is still not dialled in a busy loop.

RFC 004 has no change notification: the link re-lists every ``poll_s``
seconds, and at once when the peer sends a CAP_DECLARE unasked
(:meth:`ampcap.net.api.peer.Remote.on_declare`). It calls ``on_change()``
whenever the set of descriptors it holds changed. The descriptors of a peer
that went away are kept: a host keeps its tools through a restart of the
peer, and calls answer 5002 until the link is back.

Schemas: after each listing the link fetches the schema artifacts of the
descriptors it does not know yet from the peer itself
(:mod:`ampcap.caps.artifacts`: verified against the descriptor's hash; a peer
without that extension answers 4002 once and is not asked again), and keeps
them by hash across reconnects: :meth:`PeerLink.schema`.

Listing everything uses the ampcap ``"*"`` extension of CAP_QUERY
(:data:`ampcap.caps.bodies.EVERY_CAPABILITY`), which only a peer that
announced ``ampcap.list-all`` in HELLO is asked (R22; through a relay, none
is): for any other the query is refused before it is sent, the link logs so
once, and the gateway must be given the capability names to list (``names``).
"""

from __future__ import annotations

import logging
import math
import random
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ..caps.bodies import EVERY_CAPABILITY
from ..caps.bundle import SchemaStore
from ..caps.descriptor import Descriptor, SchemaRef
from ..display import shown
from ..errors import AmpError
from ..net.daemon.core import DaemonConfig
from ..net.api.peer import CallsItself, Peer, Remote
from ..peer.config import RELAY_DID
from ..peer.listing import NOT_OFFERED
from ..wire.extensions import LISTING
from ..caps.deprecation import Notice
from ..wire.identity import Identity

__all__ = ["DialOptions", "PeerLink", "BACKOFF_MIN_S", "BACKOFF_MAX_S", "CALLER_BACKOFF_S", "CALLER_WAIT_S",
           "REDIAL_MIN_S"]

log = logging.getLogger("ampcap.mcp")

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 30.0
REDIAL_MIN_S = 0.25  # a call's redial: at most one dial this often
CALLER_BACKOFF_S = 1.0  # the back-off's cap while callers are waiting
CALLERS_RECENT_S = 10.0  # how long after the last call the lower cap holds
CALLER_WAIT_S = 1.0  # how long a call waits for the redial it asked for
PAGE_LIMIT = 1000  # ampcap's largest page: a big peer lists in few round trips
QUERY_TIMEOUT_S = 10.0
NOT_FOUND = 4002
SCHEMA_FETCHES_AT_ONCE = 8
MAX_SCHEMAS = 20_000


def _ref_key(ref: SchemaRef) -> tuple[Any, ...]:
    return (ref.bundle_id, ref.artifact_key, ref.uri, ref.hash_alg, ref.hash)


@dataclass(frozen=True, slots=True, kw_only=True)
class DialOptions:
    """How to reach one peer (as ``ampcap invoke`` takes them)."""

    peer_did: str | None = None
    relay_to: str | None = None  # URL is a relay; calls go to this DID
    relay_did: str = RELAY_DID
    ssl_context: ssl.SSLContext | None = None
    timeout_s: float = 10.0
    config: DaemonConfig = DaemonConfig()


class PeerLink:
    """One peer as the gateway sees it: a URL to (re)dial, or a
    :class:`Remote` the caller already opened (never redialled: it is not
    ours; when it closes, calls answer 5002)."""

    def __init__(self, target: str | Remote, position: int, *, identity: Identity | None = None,
                 dial: DialOptions = DialOptions(), names: Sequence[str] = (EVERY_CAPABILITY,),
                 poll_s: float = 30.0, on_change: Callable[[], None] = lambda: None) -> None:
        self.target = target
        self.position = position
        self.label = target if isinstance(target, str) else target.did
        self._identity = identity
        self._dial = dial
        self._names = tuple(names) or (EVERY_CAPABILITY,)
        self._poll_s = poll_s
        self.on_change = on_change
        self.remote: Remote | None = None
        self.descriptors: tuple[Descriptor, ...] = ()
        self.deprecations: dict[str, Notice] = {}  # R23: the peer's in-band notices, by capability id
        self._kick = trio.Event()
        self._warned_listing = False
        self._rng = random.Random()
        self._wake = trio.Event()  # set: stop backing off, dial now
        self._connected = trio.Event()  # set while remote is usable
        self._last_dial = -math.inf  # trio.current_time() of the last dial
        self._last_call = -math.inf  # ... of the last call that found the link down
        self.dials: list[str] = []  # why each dial happened: "start", "backoff", "call" (tests and logs)
        self.local: SchemaStore | None = None  # the gateway's bundles: schemas never fetched
        self._schemas: dict[tuple[Any, ...], Any] = {}  # ref's locator + hash -> verified, parsed schema

    # ------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the link until cancelled; ``started`` once the first dial
        (and listing) succeeded or failed, so the gateway can start with
        whatever tools it has."""
        if isinstance(self.target, Remote):
            await self._session(self.target, task_status=task_status)
            log.warning("connection to %s closed (not redialled: the caller opened it)", shown(self.label))
            return
        backoff = BACKOFF_MIN_S
        started = False
        reason = "start"
        while True:
            connected = False
            self._last_dial = trio.current_time()
            self.dials.append(reason)
            try:
                peer = Peer(self._identity, config=self._dial.config)
                async with peer.connect(self.target, peer_did=self._dial.peer_did, relay_to=self._dial.relay_to,
                                        relay_did=self._dial.relay_did, ssl_context=self._dial.ssl_context,
                                        timeout=self._dial.timeout_s) as remote:
                    connected = True
                    backoff = BACKOFF_MIN_S
                    log.info("connected to %s (%s)", shown(self.label), shown(remote.did))
                    await self._session(remote, task_status=None if started else task_status)
                    started = True
                log.warning("connection to %s lost; redialling", shown(self.label))
            except CallsItself:
                if not started:
                    raise  # the gateway's own identity at the first dial: a mistake to report, not to retry
                log.warning("%s now answers with this gateway's own DID; an agent does not call itself "
                            "(next try in %.1f s)", shown(self.label), backoff)
            except (AmpError, OSError) as exc:
                code = getattr(exc, "code", 5002)
                why = exc.message if isinstance(exc, AmpError) else (exc.strerror or str(exc))
                # The message names the URL already ("cannot reach amp://…").
                log.warning("%s%s (next try in %.1f s)", f"lost {shown(self.label)}: " if connected else "",
                            shown(f"{code} {why}"), backoff)
            finally:
                self._set_remote(None)
            if not started:
                task_status.started(None)
                started = True
            reason = await self._back_off(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _back_off(self, backoff: float) -> str:
        """Sleep before the next dial; cut short by :meth:`redial_now`.
        Returns why the next dial happens."""
        self._wake = trio.Event()
        delay = backoff * self._rng.uniform(0.75, 1.0)
        if trio.current_time() - self._last_call < CALLERS_RECENT_S:
            delay = min(delay, CALLER_BACKOFF_S)
        with trio.move_on_after(delay):
            await self._wake.wait()
            # Rate limit: never two dials closer than REDIAL_MIN_S.
            await trio.sleep_until(self._last_dial + REDIAL_MIN_S)
            return "call"
        return "backoff"

    def redial_now(self) -> None:
        """A caller found the link down: dial at once (rate-limited), and
        keep the back-off short while callers keep coming."""
        self._last_call = trio.current_time()
        self._wake.set()

    async def wait_connected(self, timeout_s: float = CALLER_WAIT_S) -> Remote | None:
        """The open connection, waiting up to ``timeout_s`` for a redial."""
        if self.remote is None or not self.remote.open:
            if isinstance(self.target, Remote):
                return None  # the caller's connection: never redialled
            self.redial_now()
            with trio.move_on_after(timeout_s):
                await self._connected.wait()
        remote = self.remote
        return remote if remote is not None and remote.open else None

    def _set_remote(self, remote: Remote | None) -> None:
        self.remote = remote
        if remote is not None:
            self._connected.set()
        elif self._connected.is_set():
            self._connected = trio.Event()

    async def _session(self, remote: Remote, *, task_status: trio.TaskStatus[None] | None = None) -> None:
        """One open connection: list, then re-list on every poll or unasked
        CAP_DECLARE until the connection ends."""
        self._kick = trio.Event()
        remote.on_declare(lambda body: self._kick.set())
        try:
            await self.refresh(remote)
            self._set_remote(remote)
            if task_status is not None:
                task_status.started(None)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, remote, nursery.cancel_scope)
                while True:
                    with trio.move_on_after(self._poll_s):
                        await self._kick.wait()
                    self._kick = trio.Event()
                    if remote.open:
                        await self.refresh(remote)
        finally:
            self._set_remote(None)
            remote.on_declare(None)

    @staticmethod
    async def _watch(remote: Remote, scope: trio.CancelScope) -> None:
        await remote.closed()
        scope.cancel()

    # ------------------------------------------------------------ listing

    async def refresh(self, remote: Remote) -> None:
        """List the peer's capabilities again; ``on_change()`` if they differ."""
        try:
            found = await self.list_all(remote)
        except AmpError as exc:
            if remote.open:
                log.warning("listing the capabilities of %s failed: %s", shown(self.label),
                            shown(f"{exc.code} {exc.message}"))
            return
        if remote.open:
            await self._fetch_schemas(remote, found)
        if found != self.descriptors:
            self.descriptors = found
            log.info("%s offers %d capability versions", shown(self.label), len(found))
            self.on_change()

    def schema(self, ref: SchemaRef) -> Any:
        """The parsed schema ``ref`` names, when it was fetched (else None)."""
        return self._schemas.get(_ref_key(ref))

    async def _fetch_schemas(self, remote: Remote, descriptors: Sequence[Descriptor]) -> None:
        """Fetch what the local bundles and earlier fetches lack, a few at once."""
        from ..caps.artifacts import ArtifactFetcher

        async def invoke(capability_id: str, params: Any) -> Any:
            return await remote.invoke(capability_id, params=params, timeout=QUERY_TIMEOUT_S)

        fetcher = ArtifactFetcher(invoke)
        wanted: dict[tuple[Any, ...], SchemaRef] = {}
        for d in descriptors:
            if d.name.startswith("org.ampcap.schema."):
                continue
            for ref in (d.input_schema, d.output_schema):
                key = _ref_key(ref)
                if key in self._schemas or key in wanted or self._local_has(ref):
                    continue
                wanted[key] = ref
        if not wanted:
            return
        limit = trio.CapacityLimiter(SCHEMA_FETCHES_AT_ONCE)

        async def one(key: tuple[Any, ...], ref: SchemaRef) -> None:
            if fetcher.offered is False:
                return
            async with limit:
                try:
                    self._schemas[key] = await fetcher.schema(ref)
                except AmpError as exc:
                    log.info("no schema %s from %s: %s", shown(ref.artifact_key or ref.uri or "?"),
                             shown(self.label), shown(exc.message))

        async with trio.open_nursery() as nursery:
            for key, ref in wanted.items():
                nursery.start_soon(one, key, ref)
        if fetcher.offered is False:
            log.info("%s does not hand out schemas (no org.ampcap.schema.artifact): its tools accept any object "
                     "unless --bundle holds their schemas", shown(self.label))
        while len(self._schemas) > MAX_SCHEMAS:  # bounded: the oldest go first
            del self._schemas[next(iter(self._schemas))]

    def _local_has(self, ref: SchemaRef) -> bool:
        if self.local is None:
            return False
        try:
            self.local.load_json(ref)
        except AmpError:
            return False
        return True

    async def list_all(self, remote: Remote) -> tuple[Descriptor, ...]:
        """Every descriptor of every name listed, all pages (4002 for a name
        is no capability, not a failure)."""
        found: list[Descriptor] = []
        for name in self._names:
            cursor: str | None = None
            while True:
                try:
                    page = await remote.query(name, limit=PAGE_LIMIT, cursor=cursor, timeout=QUERY_TIMEOUT_S)
                except AmpError as exc:
                    if exc.code != NOT_FOUND:
                        raise
                    if name == EVERY_CAPABILITY and not self._warned_listing:
                        self._warned_listing = True
                        if exc.message == NOT_OFFERED:  # refused before sending (R22, peer/listing.py)
                            log.warning("%s does not offer listing every capability (it did not announce %s in "
                                        "HELLO): it has no tools until they are named with --capability NAME",
                                        shown(self.label), LISTING)
                        else:
                            log.warning("%s lists no capabilities for '*'", shown(self.label))
                    break
                found.extend(page.capabilities)
                self.deprecations.update(page.deprecations)
                cursor = page.next_cursor
                if cursor is None:
                    break
        found.sort(key=lambda d: (d.name, d.version))
        return tuple(found)
