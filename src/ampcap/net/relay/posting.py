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
from ...errors import AmpError
from ...relay import Deliver, Forward, ReportCommit
from ...relay.webhook import build_webhook
from ...wire.bearer import mint
from ...wire.cbor import loads
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
REPORT_ATTEMPTS = 6  # 1 + 2 + 4 + 8 + 16 s of waits: within the 60 s window of §5.6.7


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
        if isinstance(action, ReportCommit):
            await self._report(action)
            return
        server = self._server
        try:
            pool, _ = self._pool(action.url)
            response = await pool.request("POST", FORWARD_PATH, self._headers(action.downstream), action.wrapper)
        except (HttpFailure, UrlError, OSError) as exc:
            log.info("POST %s to %s failed: %s", FORWARD_PATH, shown(action.url), shown(str(exc)))
            server.perform(server.core.forward_failed(action.seq, action.recipient, server.clock.wall_ms(),
                                                      detail=str(exc)))
            server.wake()
            return
        log.debug("POST %s to %s: %d", FORWARD_PATH, shown(action.url), response.status)
        server.perform(server.core.forward_answered(action.seq, action.recipient, response.body,
                                                    server.clock.wall_ms()))
        server.wake()

    async def _report(self, action: ReportCommit) -> None:
        """A commit report (§5.6.6), posted until the upstream takes it:
        again after 1, 2, 4, ... s within the RFC's 60 s report window (a
        report the upstream never gets costs nothing but its copy, which it
        keeps until expiry: the safe direction). The receipt is signed once,
        so every attempt carries the same bytes."""
        delay = 1.0
        for attempt in range(REPORT_ATTEMPTS):
            if attempt:
                await trio.sleep(delay)
                delay *= 2
            try:
                pool, _ = self._pool(action.url or "")
                response = await pool.request("POST", COMMIT_PATH, self._headers(action.upstream), action.report)
            except (HttpFailure, UrlError, OSError) as exc:
                log.info("commit report to %s failed: %s", shown(action.url or "-"), shown(str(exc)))
                continue
            try:
                answer = loads(response.body)
            except AmpError:
                answer = None
            if isinstance(answer, dict) and answer.get("accepted") is True:
                log.debug("commit report to %s taken", shown(action.url or "-"))
                return
            log.info("commit report to %s refused (%d): %s", shown(action.url or "-"), response.status,
                     shown(str(answer.get("error_message") if isinstance(answer, dict) else response.status)))
        log.warning("commit report to %s not taken after %d attempts; the upstream keeps its copy until expiry",
                    shown(action.url or "-"), REPORT_ATTEMPTS)

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
