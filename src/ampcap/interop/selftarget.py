"""``ampcap interop --self``: an in-process ampcap daemon with the demo
capabilities and RFC 007 payments (``serve --demo --payments``) on
loopback, for the harness to test.

It is assembled the way ``ampcap serve --demo`` assembles its daemon
(demo manifest → catalog + params validator → :class:`Daemon`), except that
the identity is a fresh in-memory one: a self-test must never create or
read the user's identity file.

Its log records are marked (a context variable every task of the daemon
inherits) so that :class:`QuietSelfTarget` can keep the daemon's remarks off
the harness's output: vector A.7 calls an alias on purpose, and a warning
that the alias is deprecated says nothing about the target.
"""

from __future__ import annotations

import logging
import os
from contextvars import ContextVar

import trio

from ..net.transport.url import AmpUrl

__all__ = ["serve_self", "serve_self_relay", "QuietSelfTarget"]

_IN_SELF_TARGET: ContextVar[bool] = ContextVar("ampcap_in_self_target", default=False)


class QuietSelfTarget(logging.Filter):
    """A handler filter: records logged by the self-target daemon pass only
    at ``level`` or above; everyone else's pass untouched."""

    def __init__(self, level: int = logging.ERROR) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or not _IN_SELF_TARGET.get()


async def serve_self(*, task_status: trio.TaskStatus[AmpUrl] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the demo set on 127.0.0.1 (a free port) until cancelled; report its URL."""
    from ..caps.catalog import Catalog
    from ..caps.demo import demo_manifest
    from ..caps.params import ParamsValidator
    from ..net.daemon.core import Daemon
    from ..wire.identity import Identity

    # Set in this task's own context: the daemon's tasks, spawned below, copy it.
    _IN_SELF_TARGET.set(True)
    from ..caps.artifacts import artifact_service
    from ..caps.bundle import SchemaStore
    from ..net.features.payments import DEMO_CREDIT, PAID_ECHO_ID, PAID_ECHO_PRICE, PaymentService
    from ..peer.policy import parse_policy
    from ..store.database import StateStore
    from .pay_vectors import A19_DENIED_DID

    # As `serve --demo --payments --state-dir none`: the RFC 007 vectors need the workflow.
    # Its policy denies the one caller vector 007:A.19 calls as (everyone else is allowed).
    policy = parse_policy({"default": "allow", "deny": [A19_DENIED_DID]}, source="<interop --self>")
    identity = Identity.generate(os.urandom)
    state = StateStore.open(None)
    payments = PaymentService(identity, state, prices={PAID_ECHO_ID: PAID_ECHO_PRICE}, demo_credit=DEMO_CREDIT)
    manifests = [demo_manifest(), payments.manifest()]
    store = SchemaStore([m.bundle for m in manifests], offline=True)
    specs = [spec for m in manifests for spec in m.capabilities]
    service, handlers = artifact_service(specs, store)
    catalog = Catalog(specs + service, cursor_key=os.urandom(32))
    daemon = Daemon(identity, catalog, params=ParamsValidator(store), handlers={**handlers, **payments.handlers()},
                    store=state, policy=policy)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            listeners = await daemon.listen("127.0.0.1", 0)
            port = listeners[0].socket.getsockname()[1]
            task_status.started(AmpUrl("amp", "127.0.0.1", port))
    finally:
        state.close()


async def serve_self_relay(upstream_did: str, *,
                           task_status: trio.TaskStatus[tuple[AmpUrl, AmpUrl, str]] = trio.TASK_STATUS_IGNORED,
                           ) -> None:
    """``ampcap relay`` in process for ``interop --self`` (a fresh identity,
    the queue in memory), with ``upstream_did`` as its one trusted peer so
    that the harness may drive its federation endpoint; reports (AMPS URL,
    HTTP URL, its DID)."""
    from ..net.relay import RelayServer
    from ..net.relay.http_front import RelayHttpFront
    from ..relay import RelayConfig, parse_routes
    from ..store.database import StateStore
    from ..wire.identity import Identity

    _IN_SELF_TARGET.set(True)
    identity = Identity.generate(os.urandom)
    routes = parse_routes({"peer": [{"did": upstream_did, "url": "http://127.0.0.1:9", "trusted": True}]})
    server = RelayServer(identity, StateStore.open(None), config=RelayConfig(relay_did=identity.did), routes=routes)
    front = RelayHttpFront(server)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        amps = (await nursery.start(server.listen, "127.0.0.1", 0))[0].socket.getsockname()[1]
        http = (await nursery.start(front.serve, "127.0.0.1", 0))[0].socket.getsockname()[1]
        task_status.started((AmpUrl("amp", "127.0.0.1", amps), AmpUrl("http", "127.0.0.1", http), identity.did))
        await trio.sleep_forever()
