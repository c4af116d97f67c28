"""Dialing a peer: from a URL to an open stream, and why a dialled
connection never opened (``Daemon.connect``, ``Daemon.connect_stream``).

An ``amp://`` or ``amps://`` URL is dialled here over TCP (TLS for amps):
nothing answering is :class:`~ampcap.errors.Unreachable` (so several
endpoints of one peer can be tried in turn), a failed TLS handshake is
named (5002) rather than showing up as a link that "opened" and then closed,
and the daemon's deadline is a timeout (5003). HTTP and WebSocket URLs go to
``net/transport/http_client.py`` (imported only when a URL asks for it), and a URL
with several endpoints to its ``connect_any``, in RFC 002 §3.5 order. The
stream is then handed to ``daemon.connect_stream`` for HANDSHAKE and HELLO.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

import trio

from ...errors import AmpError, Unreachable
from ...peer.config import ConnectionConfig
from ...peer.connection import Connection
from ...peer.events import ConnectionTerminated
from ...peer.state import HelloState
from .stream import open_stream
from .tls import tls_failure
from .url import AmpUrl, parse_endpoints, parse_url

if TYPE_CHECKING:
    from ..daemon.link import Link
    from ..daemon.ports import StreamConnector

__all__ = ["dial", "not_opened"]

UNAVAILABLE, TIMEOUT = 5002, 5003


async def dial(daemon: StreamConnector, url: str | AmpUrl, *, peer_did: str | None, ssl_context: ssl.SSLContext | None,
               timeout_s: float, config: ConnectionConfig | None) -> Link:
    """Open a link from ``daemon`` to ``url`` (see the module docstring);
    ``AmpError`` naming the URL if that fails."""
    if isinstance(url, str) and "," in url:  # several endpoints of one peer: RFC 002 §3.5 order
        from .http_client import connect_any

        return await connect_any(daemon, parse_endpoints(url), peer_did=peer_did, ssl_context=ssl_context,
                                 timeout_s=timeout_s, config=config)
    target = parse_url(url) if isinstance(url, str) else url
    if target.binding != "amps":  # the HTTP stack is imported only when a URL asks for it
        from .http_client import dial as dial_http

        return await dial_http(daemon, target, peer_did=peer_did, ssl_context=ssl_context, timeout_s=timeout_s,
                               config=config)
    stream: trio.abc.Stream | None = None
    with trio.move_on_after(timeout_s) as scope:
        try:
            stream = await open_stream(target, ssl_context=ssl_context)
        except (OSError, UnicodeError) as exc:  # refused, no such host, no route: an AmpError like every
            # other failure here. UnicodeError: a name the resolver's IDNA step refuses (parse_url lets
            # through what the stdlib codec accepts, trio's stricter IDNA 2008 may still say no).
            raise Unreachable(str(target), getattr(exc, "strerror", None) or str(exc)) from exc
        if isinstance(stream, trio.SSLStream):
            # TLS fails here, named, rather than as a link that "opened"
            # and then closed: raw framing (a relay) says nothing back.
            try:
                await stream.do_handshake()
            except trio.BrokenResourceError as exc:
                await trio.aclose_forcefully(stream)
                raise AmpError(UNAVAILABLE, f"{target}: {tls_failure(exc) or 'the TLS handshake failed'}") \
                    from None
    if scope.cancelled_caught or stream is None:
        if stream is not None:
            await trio.aclose_forcefully(stream)
        raise AmpError(TIMEOUT, f"connecting to {target} timed out")
    try:
        return await daemon.connect_stream(stream, peer_did=peer_did, timeout_s=timeout_s, config=config)
    except AmpError as exc:
        raise AmpError(exc.code, f"{target}: {exc.message}") from None


def not_opened(conn: Connection, term: ConnectionTerminated | None, timeout_s: float, timed_out: bool) -> AmpError:
    """Why a dialled connection did not open: how it ended (``term``), else
    the step that never came within ``timeout_s``."""
    if term is not None:
        reason = term.reason
    else:  # name the step that never came: a silent port, or an AMP peer that stalls at HELLO
        missing = "HELLO_ACK" if conn.hello_state is HelloState.WAIT_ACK else "answer to our HANDSHAKE"
        reason = f"no {missing} within {timeout_s:g} s"
    # Our deadline is a timeout (5003) like the connection's own.
    code = term.code if term and term.code else TIMEOUT if timed_out else UNAVAILABLE
    return AmpError(code, f"cannot open connection: {reason}")
