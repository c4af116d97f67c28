"""Operators' figures for one daemon (``serve --metrics HOST:PORT``), as
Prometheus metrics (``prometheus_client``, imported only when asked for).

The daemon hands every action list that takes effect to :meth:`observe`
(only when metrics are on: otherwise the hot path pays one ``is None``).
An :class:`~ampcap.peer.actions.Execute` starts an invoke's clock; the
CAP_RESULT sent for it stops it: invokes by capability and outcome, and
their latency. Answers sent without a job (a rejection, a retry answered
from the journal) count under capability ``-``. Gauges (in flight,
connections, claim conflicts, and whatever a feature registers with
:meth:`add_gauge`, such as a relay's queue depth and age) are sampled once a
second, so they work the same in prometheus_client's multiprocess mode,
which ``serve --workers`` uses: the workers write their figures to a
directory the parent serves, summed, on one endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ...peer.actions import Execute
from ...peer.dedupe import InvokeKey
from ...peer.outbound import Send
from ...wire.registry import MessageType

__all__ = ["DaemonMetrics", "serve_metrics", "LATENCY_BUCKETS"]

_RESULT = int(MessageType.CAP_RESULT)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
SAMPLE_S = 1.0


class DaemonMetrics:
    def __init__(self, daemon: Any, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        reg = registry if registry is not None else REGISTRY
        self._daemon = daemon
        self.invokes = Counter("ampcap_invokes", "Invokes answered, by capability and outcome (ok or the error code)",
                               ["capability", "outcome"], registry=reg)
        self.latency = Histogram("ampcap_invoke_seconds", "From accepting an invoke to its terminal reply",
                                 ["capability"], buckets=LATENCY_BUCKETS, registry=reg)
        self.commit = Histogram("ampcap_store_commit_seconds", "One batch's commit to the state store",
                                buckets=COMMIT_BUCKETS, registry=reg)
        self.conflicts = Counter("ampcap_claim_conflicts", "Claims that met another worker's row (R25)",
                                 registry=reg)
        self.in_flight = Gauge("ampcap_invokes_in_flight", "Invokes running now", multiprocess_mode="livesum",
                               registry=reg)
        self.connections = Gauge("ampcap_connections", "Open connections, by transport", ["transport"],
                                 multiprocess_mode="livesum", registry=reg)
        self._gauge_class = Gauge
        self._registry = reg
        self._hooks: list[tuple[Any, Callable[[], float]]] = []
        self._started: dict[InvokeKey, tuple[str, float]] = {}
        self._conflicts_seen = 0

    def add_gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A figure a feature owns (the relay: ``ampcap_relay_queue_depth``,
        ``ampcap_relay_queue_age_seconds``), sampled with the others."""
        gauge = self._gauge_class(name, documentation, multiprocess_mode="livesum", registry=self._registry)
        self._hooks.append((gauge, read))

    def observe(self, actions: list[Any]) -> None:
        now = trio.current_time() if _in_trio() else 0.0
        for action in actions:
            kind = type(action)
            if kind is Execute:
                job = action.job
                self._started[job.key] = (job.capability_id, now)
            elif kind is Send:
                out = action.out
                if out.typ != _RESULT or out.reply_to is None or out.to is None:
                    continue
                body = out.body
                outcome = "ok" if type(body) is dict and "result" in body else str(
                    (body.get("error") or {}).get("code", "?") if type(body) is dict else "?")
                started = self._started.pop(InvokeKey(out.to, out.reply_to), None)
                if started is None:
                    self.invokes.labels("-", outcome).inc()
                else:
                    capability, at = started
                    self.invokes.labels(capability, outcome).inc()
                    self.latency.labels(capability).observe(max(0.0, now - at))

    def committed(self, seconds: float) -> None:
        self.commit.observe(seconds)

    def sample(self) -> None:
        daemon = self._daemon
        executor = getattr(daemon, "_executor", None)
        self.in_flight.set(executor.running if executor is not None else 0)
        inbound = sum(1 for link in daemon.links if not link.outbound)
        self.connections.labels("amp").set(inbound)
        self.connections.labels("dialled").set(len(daemon.links) - inbound)
        durable = getattr(daemon, "durable", None)
        claims = getattr(durable, "claims", None)
        if claims is not None and claims.conflicts > self._conflicts_seen:
            self.conflicts.inc(claims.conflicts - self._conflicts_seen)
            self._conflicts_seen = claims.conflicts
        for gauge, read in self._hooks:
            gauge.set(read())

    async def run(self) -> None:
        while True:
            self.sample()
            await trio.sleep(SAMPLE_S)


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def serve_metrics(address: tuple[str, int], *, multiprocess_dir: str | None = None) -> Any:
    """Serve ``/metrics`` on ``address`` from a thread (the process's
    registry; or, with ``multiprocess_dir``, every worker's figures summed).
    Returns the server (its ``server_address`` says the bound port)."""
    from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

    registry = REGISTRY
    if multiprocess_dir is not None:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiprocess_dir)
    server, _ = start_http_server(address[1], addr=address[0], registry=registry)
    return server
