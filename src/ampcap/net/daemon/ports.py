"""The narrow ports the daemon core offers what it composes.

The modules around the core (the dialers in net/transport/, the HTTP
server, the relay joining and the revocation refresher in net/features/)
are handed the daemon typed as one of these ``typing.Protocol``s, never as
:class:`~ampcap.net.daemon.core.Daemon`: they depend on the few members
they use, the core imports them and not the other way round, so there is no
import circle (tests/test_layers.py), and a test can hand them a stand-in.
``Daemon`` satisfies every port structurally; mypy checks that where the
core hands itself over.

This module imports only for type checking: it costs nothing at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ssl

    import trio

    from ...deleg.revocation import StatusCache
    from ...peer.config import ConnectionConfig
    from ...peer.connection import Connection
    from ...peer.executor import Executor
    from ...wire.identity import Identity
    from ...wire.receive import ReceivePipeline
    from ..transport.clock import Clock
    from ..transport.sink import ReplySink
    from ..transport.stream import ConnectionDriver
    from ..transport.url import AmpUrl
    from .calls import Calls
    from .link import Link

__all__ = ["Dialer", "StreamConnector", "RevocationPort", "InboundPort"]


class Dialer(Protocol):
    """Opening links to other agents (the relay joining, the revocation
    refresher, several endpoints tried in turn)."""

    @property
    def identity(self) -> Identity: ...

    @property
    def connection_config(self) -> ConnectionConfig: ...

    async def connect(self, url: str | AmpUrl, *, peer_did: str | None = None,
                      ssl_context: ssl.SSLContext | None = None, timeout_s: float = 10.0,
                      config: ConnectionConfig | None = None) -> Link: ...


class StreamConnector(Dialer, Protocol):
    """What a dialer needs to turn an open stream into a link
    (net/transport/dial.py, net/transport/http_client.py): the clock and
    entropy for bearer tokens, the calls' nursery and refusals, and the
    HANDSHAKE/HELLO over the stream."""

    @property
    def clock(self) -> Clock: ...

    @property
    def entropy(self) -> Callable[[int], bytes]: ...

    @property
    def calls(self) -> Calls: ...

    async def connect_stream(self, stream: trio.abc.Stream, *, peer_did: str | None = None,
                             timeout_s: float = 10.0, config: ConnectionConfig | None = None) -> Link: ...


class RevocationPort(Dialer, Protocol):
    """What the R20 revocation refresher needs: a link to the publisher,
    a request on it, the status cache it refreshes, the clock that cache is
    read by, and :meth:`status_settled` to hand a key back to the invokes
    that wait for it."""

    @property
    def calls(self) -> Calls: ...

    @property
    def revocation_status(self) -> StatusCache: ...

    @property
    def clock(self) -> Clock: ...

    def status_settled(self, key: tuple[str, str]) -> None: ...


class InboundPort(Protocol):
    """What the HTTP and WebSocket endpoints (net/transport/http_server.py)
    need to serve into the daemon: its pipeline for checking a POSTed
    message, :meth:`deliver` for acting on it, and server connections and
    drivers for a WebSocket."""

    @property
    def identity(self) -> Identity: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def pipeline(self) -> ReceivePipeline: ...

    @property
    def connection_config(self) -> ConnectionConfig: ...

    @property
    def closing(self) -> bool: ...

    @property
    def executor(self) -> Executor: ...

    def deliver(self, sink: ReplySink, inbound: Any) -> None: ...

    def server_connection(self, *, peer_did: str | None = None, **changes: Any) -> Connection: ...

    def driver(self, conn: Connection, stream: trio.abc.Stream) -> ConnectionDriver: ...

    async def serve_driver(self, driver: ConnectionDriver) -> None: ...
