"""Listening sockets a worker process was handed by its parent.

``serve --workers N`` (cli/workers.py) creates the listening sockets once, in
the parent, and hands them to each worker it starts: every worker accepts on
the same sockets, and the kernel gives each new connection to one of them.
A worker registers what it was handed here, keyed by the address its
command line names, before its event loop starts; :func:`take` is asked by
:func:`~ampcap.net.transport.listener.open_listeners` before it binds.
"""

from __future__ import annotations

import socket

__all__ = ["adopt", "take"]

_handed: dict[tuple[str, int], list[list[socket.socket]]] = {}


def adopt(address: tuple[str, int], sockets: list[socket.socket]) -> None:
    """``sockets`` (bound and listening) stand for ``address`` as given on
    the command line. Two addresses may be spelled alike (``--listen
    127.0.0.1:0 --http 127.0.0.1:0``: two free ports): they are taken in the
    order they were handed, which is the order the command opens them."""
    _handed.setdefault(address, []).append(sockets)


def take(host: str | None, port: int) -> list[socket.socket] | None:
    """The sockets handed for ``host:port``, once (None: bind as usual)."""
    queue = _handed.get((host or "", port))
    if not queue:
        return None
    sockets = queue.pop(0)
    if not queue:
        del _handed[(host or "", port)]
    return sockets
