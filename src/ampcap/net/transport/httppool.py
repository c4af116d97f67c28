"""A small HTTP/1.1 client for the HTTP binding: keep-alive connections, h11 on trio.

The binding needs exactly two requests, ``POST /amp/v1/messages`` and ``GET
/amp/v1/messages?…``, many of them at once. A general client (httpx was the
first choice) spent about 2 ms of CPU per request here, most of it managing
its pool and its layers, against ~0.25 ms for the server to answer; this one
keeps up to ``max_connections`` connections, gives each request an idle one
(or opens one), writes the request head and body in one ``send_all``, and
reads the response with h11 (sans-I/O, as the server does).

A request that meets a kept-alive connection the server has meanwhile closed
(nothing of a response came back) is sent once more on a fresh connection:
the server cannot have acted on it, and AMP messages are idempotent by id
anyway (RFC 001 §16, ruling R8).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import h11
import trio

from .tls import client_context, tls_failure, wrap_client
from .url import AmpUrl, format_hostport

__all__ = ["HttpPool", "HttpFailure", "HttpResponse"]

_READ = 64 * 1024


class HttpFailure(Exception):
    """The request got no usable response (``connect``: nothing answered at all)."""

    def __init__(self, message: str, *, connect: bool = False) -> None:
        super().__init__(message)
        self.connect = connect


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class _Stale(Exception):
    """A kept-alive connection was closed before any of the response arrived."""


class _Conn:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)


class HttpPool:
    """Keep-alive HTTP/1.1 connections to one origin."""

    def __init__(self, url: AmpUrl, *, ssl_context: ssl.SSLContext | None = None, max_connections: int = 64,
                 max_body: int = 64 << 20, timeout_s: float = 30.0) -> None:
        self._url = url
        self._host = format_hostport(url.host, url.port)
        self._ssl = (ssl_context or client_context()) if url.tls else None
        self._slots = trio.Semaphore(max_connections)
        self._idle: list[_Conn] = []
        self._max_body = max_body
        self._timeout = timeout_s
        self._closed = False

    async def request(self, method: str, target: str, headers: dict[str, str], body: bytes = b"") -> HttpResponse:
        """One request; :class:`HttpFailure` when no response came."""
        head = [("host", self._host), *headers.items()]
        if method == "POST" or body:
            head.append(("content-length", str(len(body))))
        async with self._slots:
            with trio.move_on_after(self._timeout) as scope:
                for attempt in (0, 1):
                    conn = self._idle.pop() if self._idle and attempt == 0 else await self._open()
                    try:
                        return await self._exchange(conn, method, target, head, body)
                    except _Stale:
                        await trio.aclose_forcefully(conn.stream)
                        continue
            if scope.cancelled_caught:
                raise HttpFailure(f"no response within {self._timeout:g} s")
        raise HttpFailure("the server closed the connection without answering")

    async def _open(self) -> _Conn:
        if self._closed:
            raise HttpFailure("the client is closed")
        try:
            stream: trio.abc.Stream = await trio.open_tcp_stream(self._url.host, self._url.port)
        except (OSError, UnicodeError) as exc:
            raise HttpFailure(getattr(exc, "strerror", None) or str(exc), connect=True) from None
        if self._ssl is not None:
            tls = wrap_client(stream, self._ssl, self._url.host)
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                await trio.aclose_forcefully(tls)
                raise HttpFailure(tls_failure(exc) or "the TLS handshake failed") from None
            stream = tls
        return _Conn(stream)

    async def _exchange(self, conn: _Conn, method: str, target: str, head: list[tuple[str, str]],
                        body: bytes) -> HttpResponse:
        h = conn.h11
        try:
            data = h.send(h11.Request(method=method, target=target, headers=head))
            if body:
                data += h.send(h11.Data(data=body))
            data += h.send(h11.EndOfMessage())
            try:
                await conn.stream.send_all(data)
            except trio.BrokenResourceError:
                # The server may have refused before reading it all (413) and
                # closed: its answer can still be waiting to be read.
                pass
            response: h11.Response | None = None
            parts: list[bytes] = []
            size = 0
            while True:
                event = h.next_event()
                if event is h11.NEED_DATA:
                    chunk = await conn.stream.receive_some(_READ)
                    if not chunk and response is None:
                        raise _Stale()
                    h.receive_data(bytes(chunk))
                    continue
                if type(event) is h11.Response:
                    response = event
                elif type(event) is h11.Data:
                    size += len(event.data)
                    if size > self._max_body:
                        raise HttpFailure(f"response body over {self._max_body} bytes")
                    parts.append(bytes(event.data))
                elif type(event) is h11.EndOfMessage:
                    break
                elif type(event) is h11.ConnectionClosed:
                    raise HttpFailure("the server closed the connection mid-response")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if isinstance(exc, trio.BrokenResourceError) and tls_failure(exc):
                raise HttpFailure(tls_failure(exc) or "TLS failed") from None
            raise _Stale() from None
        except h11.ProtocolError as exc:
            await trio.aclose_forcefully(conn.stream)
            raise HttpFailure(f"malformed HTTP response: {exc}") from None
        except BaseException:
            await trio.aclose_forcefully(conn.stream)
            raise
        assert response is not None
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in response.headers}
        if h.our_state is h11.DONE and h.their_state is h11.DONE and not self._closed:
            h.start_next_cycle()
            self._idle.append(conn)
        else:
            await trio.aclose_forcefully(conn.stream)
        return HttpResponse(response.status_code, headers, b"".join(parts))

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await trio.aclose_forcefully(conn.stream)
