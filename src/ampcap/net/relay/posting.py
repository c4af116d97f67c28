"""What the relay POSTs: custody handoffs (RFC 002 §6.5), commit reports
(§6.6) and webhook deliveries (§6.3), each in its own task, the outcome
told back to the core.

A federation POST carries an R21 bearer token for the downstream (or
upstream) relay's DID: the other side answers only a trusted relay whose
token principal is the one its wrapper names.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import trio

from ...display import shown
from ...relay import Deliver, Forward, ReportCommit
from ...relay.webhook import build_webhook
from ...wire.bearer import mint
from ...wire.httpmap import CONTENT_TYPE, TRANSPORT_VERSION_HEADER
from ..transport.httppool import HttpFailure, HttpPool
from ..transport.url import UrlError, parse_url

if TYPE_CHECKING:
    from ...relay import Action, RelayCore
    from ...wire.identity import Identity
    from ..transport.clock import Clock


class RelayEdge(Protocol):
    """What the poster uses of the relay server (a port: no import circle)."""

    identity: Identity
    clock: Clock
    core: RelayCore
    counters: dict[str, int]

    @property
    def entropy(self) -> Callable[[int], bytes]: ...

    def perform(self, actions: list[Action]) -> None: ...

    def wake(self) -> None: ...

__all__ = ["RelayPoster", "FORWARD_PATH", "COMMIT_PATH"]

log = logging.getLogger("ampcap.relay")

FORWARD_PATH = "/amp/v1/relay/forward"
COMMIT_PATH = "/amp/v1/relay/commit"


class RelayPoster:
    def __init__(self, server: RelayEdge, nursery: trio.Nursery, *, ssl_context: ssl.SSLContext | None) -> None:
        self._server = server
        self._nursery = nursery
        self._ssl = ssl_context
        self._pools: dict[str, HttpPool] = {}

    def _pool(self, url: str) -> tuple[HttpPool, str]:
        # A webhook URL has a path of its own; an AMP endpoint URL has none.
        parts = urlsplit(url)
        parsed = parse_url(f"{parts.scheme}://{parts.netloc}")
        key = str(parsed)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = HttpPool(parsed, ssl_context=self._ssl, timeout_s=5.0)
        return pool, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def _headers(self, audience: str | None) -> dict[str, str]:
        headers = {"content-type": CONTENT_TYPE, TRANSPORT_VERSION_HEADER.lower(): "1"}
        if audience is not None:
            server = self._server
            headers["authorization"] = "Bearer " + mint(server.identity, audience, now_ms=server.clock.wall_ms(),
                                                        entropy=server.entropy)
        return headers

    def post(self, action: Forward | ReportCommit) -> None:
        self._nursery.start_soon(self._post, action)

    def webhook(self, action: Deliver, url: str) -> None:
        self._nursery.start_soon(self._webhook, action, url)

    async def _post(self, action: Forward | ReportCommit) -> None:
        server = self._server
        if isinstance(action, Forward):
            target, audience, path = action.url, action.downstream, FORWARD_PATH
        else:
            target, audience, path = action.url or "", action.upstream, COMMIT_PATH
        try:
            pool, _ = self._pool(target)
            response = await pool.request("POST", path, self._headers(audience),
                                          action.wrapper if isinstance(action, Forward) else action.report)
        except (HttpFailure, UrlError, OSError) as exc:
            log.info("POST %s to %s failed: %s", path, shown(target), shown(str(exc)))
            if isinstance(action, Forward):
                server.perform(server.core.forward_failed(action.seq, action.recipient, server.clock.wall_ms(),
                                                          detail=str(exc)))
                server.wake()
            return
        log.debug("POST %s to %s: %d", path, shown(target), response.status)
        if isinstance(action, Forward):
            server.perform(server.core.forward_answered(action.seq, action.recipient, response.body,
                                                        server.clock.wall_ms()))
            server.wake()

    async def _webhook(self, action: Deliver, url: str) -> None:
        server = self._server
        headers, body = build_webhook(server.identity, action.raw, server.clock.wall_ms())
        try:
            pool, path = self._pool(url)
            response = await pool.request("POST", path, {**self._headers(None), **headers}, body)
            ok = 200 <= response.status < 300
        except (HttpFailure, UrlError, OSError) as exc:
            log.info("webhook to %s failed: %s", shown(url), shown(str(exc)))
            ok = False
        if ok:
            server.counters["delivered"] += 1
            log.info("deliver seq=%s to %s (webhook)", action.seq, shown(action.recipient))
        elif action.seq is not None:
            server.perform(server.core.delivery_failed(action.seq, action.recipient, server.clock.wall_ms()))
            server.wake()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            for pool in self._pools.values():
                await pool.aclose()
