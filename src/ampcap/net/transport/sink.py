"""Where replies go when a message came without a connection.

The executor names the destination of each reply by the key it was handed
(``Send(conn, out)``). For a connection that key is its :class:`~ampcap.net.daemon.link.Link`;
for a message POSTed over HTTP (RFC 002 §6.1) there is no connection, so the
HTTP front hands the daemon a :class:`ReplySink` instead (one per transport
principal), and the daemon gives it the replies to seal and keep.
"""

from __future__ import annotations

from ...peer.outbound import Outbound
from ...wire.envelope import Envelope

__all__ = ["ReplySink"]


class ReplySink:
    """A reply destination that is not a connection."""

    peer_did: str | None = None  # whom the replies are for (log lines)
    relay_acks = False  # as Link.relay_acks: a sink is never a link to an RFC 003 relay

    def send_nowait(self, out: Outbound) -> Envelope:
        """Seal and keep ``out`` (``MessageTooLarge`` like a connection's)."""
        raise NotImplementedError
