"""``ampcap serve``'s state store and metrics, apart from the command itself:
opening the store ``--state-dir``/``--state-url`` name (R19) with its owner
lock (R25: a store is shared only by the workers of one group, whose token
:data:`~ampcap.cli.workers.GROUP_ENV` carries), and serving ``--metrics``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..errors import AmpError
from .errors import CommandError, UsageError
from .workers import GROUP_ENV

__all__ = ["open_state_store", "start_metrics", "args_address", "METRICS_CHILD_ENV"]

log = logging.getLogger("ampcap.serve")


def open_state_store(state_dir: Path | str | None, durability: str, did: str, state_url: str | None = None) -> Any:
    """The open StateStore (R19) for ``--state-dir`` (None: not given, the
    identity's default; "none": in memory) or ``--state-url``, and
    ``--durability``; its owner lock taken (R25: a store is shared only by
    workers of one group)."""
    from ..display import MESSAGE_LIMIT, shown
    from ..store.database import Durability, StateStore, default_state_dir
    from ..store.owner import StoreBusy

    try:
        if state_url is not None:
            from ..store.opening import is_store_url, open_store

            if not is_store_url(state_url):
                raise UsageError(f"--state-url {state_url!r}: expected postgresql://...")
            store = open_store(state_url, durability=Durability(durability))
        else:
            directory = default_state_dir(did) if state_dir is None else None if state_dir == "none" \
                else Path(state_dir)
            store = StateStore.open(directory, durability=Durability(durability))
    except AmpError as exc:
        raise CommandError(exc.message) from None
    if not store.durable:
        return store
    group = os.environ.get(GROUP_ENV) or None
    try:
        store.ownership = store.take_ownership(group)
    except StoreBusy as exc:
        store.close()
        raise CommandError(f"{exc.message}: stop that daemon, give this one its own --state-dir (or --state-dir "
                           f"none), or run them as workers of one group (serve --workers N; on several machines, "
                           f"the same {GROUP_ENV} for each)") from None
    except Exception as exc:  # the database went away between opening and locking
        store.close()
        raise CommandError(f"state store {store.where}: {shown(exc, MESSAGE_LIMIT)}") from None
    if group is not None:
        from ..net.daemon.claims import new_worker_id

        store.worker_id = new_worker_id()
    log.info("state: %s (durability %s%s)", store.where, durability,
             f", worker {store.worker_id}" if store.worker_id is not None else "")
    return store


METRICS_CHILD_ENV = "AMPCAP_METRICS_CHILD"  # a worker of serve --workers --metrics: the parent serves


def start_metrics(daemon: Any, address: tuple[str, int], *, serve: bool) -> None:
    try:
        from ..net.daemon.metrics import DaemonMetrics, serve_metrics
    except ImportError:
        raise CommandError("--metrics needs prometheus_client: pip install 'ampcap[metrics]'") from None
    if serve:
        try:
            server = serve_metrics(address)
        except OSError as exc:
            raise CommandError(f"--metrics: cannot listen on {args_address(address)}: "
                               f"{exc.strerror or exc}") from None
        log.info("metrics: http://%s/metrics", args_address(server.server_address[:2]))
    metrics = DaemonMetrics(daemon)
    daemon.metrics = metrics
    daemon.observe = metrics.observe
    if daemon.durable is not None:
        daemon.durable.on_commit = metrics.committed


def args_address(address: Any) -> str:
    from ..net.transport.url import format_hostport

    return format_hostport(str(address[0]), int(address[1]))
