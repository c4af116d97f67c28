"""The serving half of a daemon: everything its provider side needs, built
together and only when needed (issue 26).

A daemon with something to serve (a catalog entry, local handlers, a state
store, a revocation publisher) builds it in its constructor; a client-only
daemon on the first message that needs it (an inbound CAP_INVOKE or
CAP_QUERY, a DELEG_* message) or when someone reads one of its parts. This
module imports the executor, RFC 005 delegation, the state store (sqlite3)
and the jobs at module level, so ``net/daemon/core.py`` imports *it* only inside
``Daemon._serve_half``: a one-shot ``ampcap invoke`` loads none of them
(tests/cli/test_startup_imports.py).

The parts:

* the state store (R19): the one given, else one in memory;
* RFC 005: the credential store over it, the revocation status cache, the
  chain verifier (verifier DID defaulting to ours; the revocation publisher,
  if configured, asked about stale statuses) and the DELEG_* service;
* the executor, sealing terminal replies once (R8), journaling into the
  store when it is durable, and its jobs;
* with a durable store, the :class:`~ampcap.net.daemon.durable.DurableState` that
  holds action lists until their records are committed (restoring the
  journal and the sessions now).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from ...caps.catalog import Catalog
from ...deleg.chain import ChainVerifier, VerifierConfig
from ...deleg.revocation import RevocationChecker, StatusCache
from ...deleg.service import DelegationService
from ...peer import executor as executor_module
from ...caps.deprecation import DeprecationNotices, notices_for
from ...peer.listing import agrees
from ...wire.extensions import DEPRECATION
from ...peer.limits import InFlightLimits
from ...peer.logthrottle import LogThrottle
from ...peer.policy import Policy
from ...peer.sealing import Sealer
from ...peer.status_wait import FetchStatus
from ...session.provider import SessionProvider
from ...store import StateStore
from ...store.delegation import DelegationStore
from ...wire.identity import Identity, KeyResolver
from ...wire.registry import error_info
from ..transport.clock import Clock
from .config import DaemonConfig
from .jobs import Jobs, LocalHandler
from .link import agreed_extensions

if TYPE_CHECKING:
    from .durable import DurableState

__all__ = ["ServingHalf"]

log = logging.getLogger("ampcap.daemon")

# The executor's action classes the daemon's _apply tells apart by identity.
ACTION_CLASSES = (executor_module.Execute, executor_module.Cancel, executor_module.Audit, FetchStatus)


def _deprecations(identity: Identity, catalog: Catalog) -> DeprecationNotices | None:
    """R23: the catalog's deprecated versions, told in-band to peers that
    announced ``ampcap.deprecation``; None when nothing is deprecated (then
    no reply pays for the check)."""
    found = notices_for(spec.descriptor for spec in catalog.specs)
    if not found:
        return None
    return DeprecationNotices(found, sign=identity.sign, did=identity.did,
                              announced=_announced_deprecation)


def _announced_deprecation(conn: Any) -> bool:  # conn: a Link, or an HTTP POST's reply sink
    return DEPRECATION in agreed_extensions(conn)


def _agreed_listing(conn: Any, sender: str) -> bool:  # R22: "*" is listed only where both announced it
    return agrees(agreed_extensions(conn), getattr(conn, "peer_did", None), sender)


class ServingHalf:
    """The provider side of one daemon (see the module docstring)."""

    def __init__(self, *, identity: Identity, catalog: Catalog, config: DaemonConfig, clock: Clock,
                 sessions: SessionProvider, store: StateStore | None, key_resolver: KeyResolver, params: Any,
                 policy: Policy, handlers: Mapping[str, LocalHandler], sealer: Sealer,
                 apply: Callable[[list[Any]], None], throttle: LogThrottle) -> None:
        """``apply``: the daemon's, where the jobs', the durable state's and
        the shutdown's actions take effect; ``throttle``: the daemon's log
        throttle."""
        self._apply = apply
        # R19: the durable state (in memory unless serve --state-dir names a directory).
        self.store: StateStore = store if store is not None else StateStore.open(None)
        if params is None:
            from ...caps.params import ParamsValidator
            from ...caps.bundle import SchemaStore

            params = ParamsValidator(SchemaStore([], offline=True))
        limits = InFlightLimits(per_connection=config.max_in_flight_per_connection, total=config.max_in_flight)
        # RFC 005: credentials and revocations kept in the store; the verifier
        # consults it for every link (R20; no publisher: bounded offline mode).
        self.delegations = DelegationStore(self.store)
        self.revocation_status = StatusCache()
        deleg_config = config.delegation or VerifierConfig()
        if deleg_config.verifier_did is None:
            deleg_config = replace(deleg_config, verifier_did=identity.did)
        publisher = config.revocation_publisher
        self.verifier = ChainVerifier(key_resolver, RevocationChecker(
            store=self.delegations, cache=self.revocation_status,
            publisher_for=(lambda delegator: publisher) if publisher is not None else None), deleg_config)
        self.deleg_service = DelegationService(self.delegations, key_resolver, own_did=identity.did)
        # Terminal replies are sealed by the executor, once: a retry gets the same bytes (R8).
        self.executor = executor_module.Executor(registry=catalog, resolver=catalog, params=params, policy=policy,
                                                 limits=limits, config=config.executor, seal=sealer,
                                                 delegation=self.verifier, journal=self.store.durable,
                                                 fetch_statuses=publisher is not None,
                                                 deprecations=_deprecations(identity, catalog),
                                                 listing=_agreed_listing)
        self.durable: DurableState | None = None
        self.holds: Callable[[list[Any]], bool] | None = None  # which action lists the durable state holds
        if self.store.durable:
            from .durable import DurableState, holds

            self.durable = DurableState(self.store, self.executor, sessions, catalog, clock, apply, throttle)
            self.holds = holds
        self.jobs = Jobs(self.executor, apply, clock, handlers)

    async def start(self, nursery: trio.Nursery, catalog: Catalog) -> None:
        """The daemon runs: jobs run as its tasks (they end with the daemon,
        not with the connection that started them), and the MCP servers the
        bindings use start (or are connected) once, now."""
        self.jobs.nursery = nursery
        await self.jobs.open_bindings(nursery, [spec.binding for spec in catalog.specs])

    def end_running(self, now: int, *, timeout_s: float, hurried: bool) -> None:
        """The daemon's drain is done waiting: whatever still runs ends with
        its one terminal CAP_RESULT (the shutdown code), and with a durable
        store those replies are committed, then sent."""
        executor = self.executor
        if executor.running:
            code = executor.config.shutdown_code
            if hurried:
                log.info("drain cut short: invokes_running=%d end with %d %s", executor.running, code,
                         error_info(code).name)
            else:
                log.warning("drain timeout after %gs: invokes_running=%d end with %d %s", timeout_s,
                            executor.running, code, error_info(code).name)
        actions = executor.shutdown(now)
        if self.durable is not None:  # their 5002s close them as cut short (a paid call's payment comes back)
            self.durable.cut_short(a.key for a in actions if type(a) is executor_module.Cancel)
        self._apply(actions)
        if self.durable is not None:
            self.durable.flush(until_empty=True)

    async def close(self) -> None:
        """Last in the drain: the bindings' MCP servers stop, and each
        capability's usage is logged."""
        await self.jobs.close_bindings()
        for usage in self.jobs.usage.snapshot():
            log.info("usage %s", usage.summary())
