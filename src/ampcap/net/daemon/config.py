"""A daemon's settings: :class:`DaemonConfig` (re-exported by
``ampcap.net.daemon.core``, where callers import it from).

Everything about a :class:`~ampcap.net.daemon.core.Daemon` that is not a
collaborator: the connection, executor and invoker settings it starts from,
the limits it holds peers to across all their connections, how long a drain
waits, and the RFC 005 verifier and R20 revocation publisher settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ...peer.admission import ExecutorConfig
from ...peer.config import ConnectionConfig
from ...peer.invoker import InvokerConfig
from ...wire.signing import Profile

if TYPE_CHECKING:
    from ...deleg.chain import VerifierConfig

__all__ = ["DaemonConfig"]


class DaemonConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything about a daemon that is not a collaborator."""

    connection: ConnectionConfig = msgspec.field(default_factory=ConnectionConfig)
    executor: ExecutorConfig = msgspec.field(default_factory=ExecutorConfig)
    invoker: InvokerConfig = msgspec.field(default_factory=InvokerConfig)
    max_in_flight: int = 1024  # running invokes, whole daemon → 5004 beyond
    max_in_flight_per_connection: int = 64  # → 5004 beyond
    max_connections: int = 10_000
    # Bytes queued for peers across all connections (net/budget.SendBudget):
    # past it, every connection with output still unsent stops reading.
    max_send_buffer_total: int = 64 << 20
    # Bytes of large frames being received across all connections
    # (net/budget.ReceiveBudget): a frame that does not fit waits, unread.
    max_receive_buffer_total: int = 64 << 20
    drain_timeout_s: float = 10.0  # SIGTERM: how long running invokes may finish
    profile: Profile = Profile.RFC  # Sig_Input variant accepted (R15)
    delegation: VerifierConfig | None = None  # RFC 005 verifier settings (verifier_did defaults to ours)
    # R20: a revocation publisher asked (DELEG_QUERY) about every delegator's
    # credentials; None = the store alone decides (bounded offline mode).
    revocation_publisher: str | None = None
    revocation_publisher_did: str | None = None  # pin the publisher's DID (else whoever answers at the URL)
    # How long a delegated invoke waits for the publisher's answer about a
    # status it lacks before it is refused 5002 (RFC 005 §6.3).
    revocation_query_timeout_s: float = 2.0
