"""The RFC 003 relay as a process (``ampcap relay``): the trio edge that
drives one sans-I/O :class:`~ampcap.relay.RelayCore`.

:mod:`.server` (:class:`RelayServer`: AMPS links, the clock, the actions
performed after the call that produced them returned), :mod:`.http_front`
(the RFC 002 endpoints: POST/GET ``/amp/v1/messages``, the WebSocket, the
federation POSTs), :mod:`.posting` (what the relay POSTs: webhook
deliveries, forwards and commit reports).
"""

from __future__ import annotations

from .server import RelayServer, RelaySettings

__all__ = ["RelayServer", "RelaySettings"]
