"""Accept loop: one task per connection, a global connection limit, graceful stop.

Each accepted stream gets its own task in one nursery, so a slow connection
never delays accepting or serving another. Past ``max_connections`` a new
stream gets a transport ERROR frame (5004 OVERLOADED, RFC 002 §4.5) and is
closed at once, before any HANDSHAKE: this costs one small write, not a
Connection. :meth:`Listener.stop` stops accepting and sends GOAWAY on every
open connection; :meth:`Listener.serve` returns when the last one has closed
(each closes by itself at the end of its drain period at the latest).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable

import trio

from ...peer.connection import Connection
from ...peer.logthrottle import LogThrottle
from ...wire.frames import FrameType, encode_frame
from ...wire.transport import TransportError
from .clock import wall_clock_ms
from .inherited import take as take_inherited
from .budget import ReceiveBudget, SendBudget
from .stream import ConnectionDriver
from .tls import wrap_server
from .url import format_hostport

log = logging.getLogger("ampcap.listener")

__all__ = ["Listener", "OVERLOADED_FRAME", "open_listeners"]

OVERLOADED_FRAME = encode_frame(FrameType.ERROR, TransportError(
    code=5004, message="too many connections; retry later").to_payload())

ConnectionHandler = Callable[[ConnectionDriver], Awaitable[None]]


async def open_listeners(host: str | None, port: int, *, backlog: int | None = None) -> list[trio.SocketListener]:
    """trio's TCP listeners on ``host:port``; a failure (a port in use, an
    address not ours) is an OSError that names the address, so whoever reports
    it says which one."""
    handed = take_inherited(host, port)
    if handed is not None:  # a worker of serve --workers: its parent's sockets (transport/inherited.py)
        return [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in handed]
    try:
        return await trio.open_tcp_listeners(port, host=host, backlog=backlog)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {format_hostport(host or '*', port)}: {exc.strerror or exc}") from None


async def _run_driver(driver: ConnectionDriver) -> None:
    await driver.run()


class Listener:
    """Serve AMP connections on one or more trio listeners.

    ``new_connection`` builds the server-side Connection for each stream.
    ``handler`` receives the (not yet running) driver: it may set
    ``driver.on_event``, register the driver, and must ``await driver.run()``
    (the default does only that).
    """

    def __init__(self, new_connection: Callable[[], Connection], *, handler: ConnectionHandler = _run_driver,
                 max_connections: int = 10_000, ssl_context: ssl.SSLContext | None = None,
                 clock_ms: Callable[[], int] = wall_clock_ms, send_budget: SendBudget | None = None,
                 receive_budget: ReceiveBudget | None = None, refusal: bytes | None = OVERLOADED_FRAME) -> None:
        self._new_connection = new_connection
        # What a connection over the limit is told before it is closed: an
        # RFC 002 ERROR frame, or nothing (raw framing has no transport
        # ERROR, and an AMP ERROR needs a sender DID we have not heard).
        self._refusal = refusal
        self._refusal_lines = LogThrottle()  # a peer can open connections at will
        self._handler = handler
        self.max_connections = max_connections
        self._ssl = ssl_context
        self._clock = clock_ms
        self._send_budget = send_budget  # both shared by every connection accepted here
        self._receive_budget = receive_budget
        self.drivers: set[ConnectionDriver] = set()
        self.refused = 0
        self.accepted = 0
        self._accept_scope: trio.CancelScope | None = None
        self._stopping = False
        self._drain_reason = (0, "")

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The server TLS context (None: plain TCP); the HTTP front uses it too."""
        return self._ssl

    @property
    def active(self) -> int:
        return len(self.drivers)

    async def serve_tcp(self, port: int, host: str | None = None, *,
                        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``host:port`` (port 0 = any free port; ``task_status``
        reports the listeners so the caller can read the bound address)."""
        listeners = await open_listeners(host, port, backlog=4096)
        await self.serve(listeners, task_status=task_status)

    async def serve(self, listeners: list[trio.SocketListener], *,
                    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept until :meth:`stop`, then wait for every connection to end."""
        try:
            async with trio.open_nursery() as connections:
                with trio.CancelScope() as self._accept_scope:
                    if self._stopping:
                        self._accept_scope.cancel()
                    await trio.serve_listeners(self._handle, listeners, handler_nursery=connections,
                                               task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await trio.aclose_forcefully(listener)

    def stop(self, reason: int = 0, message: str = "server shutting down") -> None:
        """Stop accepting; GOAWAY on every connection (they drain, then close)."""
        self._stopping = True
        self._drain_reason = (reason, message)
        if self._accept_scope is not None:
            self._accept_scope.cancel()
        for driver in list(self.drivers):
            driver.start_drain(reason, message)

    async def _handle(self, stream: trio.SocketStream) -> None:
        if self._stopping or len(self.drivers) >= self.max_connections:
            self.refused += 1
            self._refusal_lines.log(log, "connection refused", logging.INFO, int(time.monotonic() * 1000),
                                    "connection refused (%s): %d open, the limit is %d",
                                    "shutting down" if self._stopping else "overloaded", len(self.drivers),
                                    self.max_connections)
            # Read until the peer hangs up (1 s at most) after the refusal:
            # closing with its HANDSHAKE still unread would reset the
            # connection and could destroy the ERROR frame before it is read.
            with trio.move_on_after(1):
                try:
                    # Inside TLS: a TLS client reads plaintext as a broken
                    # handshake, not as 5004. (TLS has no half-close.)
                    peer: trio.abc.Stream = stream if self._ssl is None else wrap_server(stream, self._ssl)
                    if self._refusal is not None:
                        await peer.send_all(self._refusal)
                    if self._ssl is None:
                        await stream.send_eof()
                    while await peer.receive_some(4096):
                        pass
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            await trio.aclose_forcefully(stream)
            return
        self.accepted += 1
        wrapped: trio.abc.Stream = wrap_server(stream, self._ssl) if self._ssl is not None else stream
        driver = ConnectionDriver(self._new_connection(), wrapped, clock_ms=self._clock,
                                  send_budget=self._send_budget, receive_budget=self._receive_budget)
        self.drivers.add(driver)
        try:
            await self._handler(driver)
        finally:
            self.drivers.discard(driver)
            if not driver.closed.is_set():
                await trio.aclose_forcefully(wrapped)
