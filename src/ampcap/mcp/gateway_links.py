"""The gateway's AMP side: one :class:`PeerLink` per peer, kept alive.

A link dials its peer through the Python API (:meth:`ampcap.net.api.peer.Peer.connect`,
so every transport the URL dialer learns comes for free), lists the peer's
capabilities with CAP_QUERY over all pages, and keeps the connection open.
When the connection is lost it redials with exponential back-off (0.5 s
doubling to 30 s, with jitter), and while it is down :attr:`PeerLink.remote`
is ``None``, so a tools/call can answer 5002 at once instead of waiting.

RFC 004 has no change notification: the link re-lists every ``poll_s``
seconds, and at once when the peer sends a CAP_DECLARE unasked
(:meth:`ampcap.net.api.peer.Remote.on_declare`). It calls ``on_change()``
whenever the set of descriptors it holds changed. The descriptors of a peer
that went away are kept: a host keeps its tools through a restart of the
peer, and calls answer 5002 until the link is back.

Listing everything uses the ampcap ``"*"`` extension of CAP_QUERY
(:data:`ampcap.caps.bodies.EVERY_CAPABILITY`); for a peer without it, the
gateway is given the capability names to list (``names``).
"""

from __future__ import annotations

import logging
import random
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from ..caps.bodies import EVERY_CAPABILITY
from ..caps.descriptor import Descriptor
from ..display import shown
from ..errors import AmpError
from ..net.daemon.core import DaemonConfig
from ..net.api.peer import CallsItself, Peer, Remote
from ..peer.config import RELAY_DID
from ..caps.deprecation import Notice
from ..wire.identity import Identity

__all__ = ["DialOptions", "PeerLink", "BACKOFF_MIN_S", "BACKOFF_MAX_S"]

log = logging.getLogger("ampcap.mcp")

BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 30.0
PAGE_LIMIT = 1000  # ampcap's largest page: a big peer lists in few round trips
QUERY_TIMEOUT_S = 10.0
NOT_FOUND = 4002


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
        while True:
            connected = False
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
                self.remote = None
            if not started:
                task_status.started(None)
                started = True
            await trio.sleep(backoff * self._rng.uniform(0.75, 1.0))
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _session(self, remote: Remote, *, task_status: trio.TaskStatus[None] | None = None) -> None:
        """One open connection: list, then re-list on every poll or unasked
        CAP_DECLARE until the connection ends."""
        self._kick = trio.Event()
        remote.on_declare(lambda body: self._kick.set())
        try:
            await self.refresh(remote)
            self.remote = remote
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
            self.remote = None
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
        if found != self.descriptors:
            self.descriptors = found
            log.info("%s offers %d capability versions", shown(self.label), len(found))
            self.on_change()

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
                        log.warning("%s lists no capabilities for '*' (none, or a peer without the ampcap "
                                    "listing extension: name them with --capability)", shown(self.label))
                    break
                found.extend(page.capabilities)
                self.deprecations.update(page.deprecations)
                cursor = page.next_cursor
                if cursor is None:
                    break
        found.sort(key=lambda d: (d.name, d.version))
        return tuple(found)
