"""Joining a relay like the public Rust example's, and checking that it
still forwards to us (``Daemon.join_relay``, ``serve --relay``).

Such a relay frames with a bare 4-byte length, registers a connection under
the ``from`` of its first parsable frame, forwards frames to the online
recipients in ``to`` and silently drops the rest. So the link to it has raw
framing, no keepalive (the relay would not answer), no strict principal
binding (messages from many senders arrive on this one connection), and its
first frame registers us: a HELLO addressed to the relay's own DID, as the
example's clients send (nobody is registered under that DID, so the relay
drops it). Invokes reaching us through the link are served like any others;
calls through it name their recipient (``to=``).

Such a relay keeps one connection per DID: another connection whose first
frame comes ``from`` our DID (a caller run with our key, say) takes the
registration over, and when that one ends the relay forgets our DID, while
our link stays open and silent. :func:`watch` notices: every ``probe_s``
seconds it sends a PING addressed to ourselves through the relay, and when
that probe does not come back the link is closed, so whoever keeps it
(``serve --relay``) dials again and registers anew.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import trio

from ...peer.config import RELAY_HELLO_VERSION, RELAY_MAX_MSG_SIZE, ConnectionConfig
from ...peer.outbound import Outbound
from ...wire.frames import Framing
from ...wire.registry import MessageType
from ..transport.url import AmpUrl

if TYPE_CHECKING:
    from ..daemon.link import Link
    from ..daemon.ports import Dialer

__all__ = ["register", "watch", "probe_returned"]

log = logging.getLogger("ampcap.daemon")

_PING = int(MessageType.PING)


def relay_config(base: ConnectionConfig) -> ConnectionConfig:
    """``base`` as a link to such a relay needs it (see the module docstring)."""
    return replace(base, framing=Framing.RAW, strict_principal=False, keepalive_interval_ms=None,
                   max_msg_size=min(base.max_msg_size, RELAY_MAX_MSG_SIZE))


async def register(daemon: Dialer, url: str | AmpUrl, *, relay_did: str, timeout_s: float,
                   ssl_context: ssl.SSLContext | None) -> Link:
    """Dial the relay at ``url`` from ``daemon`` and register there under the daemon's DID."""
    link = await daemon.connect(url, peer_did=relay_did, ssl_context=ssl_context, timeout_s=timeout_s,
                                config=relay_config(daemon.connection_config))
    link.driver.send_nowait(Outbound(typ=int(MessageType.HELLO), body={"versions": [RELAY_HELLO_VERSION]},
                                     to=relay_did))
    log.info("registered at relay %s as %s", url, daemon.identity.did)
    return link


async def watch(link: Link, url: str, probe_s: float, own_did: str, send: Callable[[Link, Outbound], None],
                closing: Callable[[], bool]) -> None:
    """Close a relay link once the relay stops forwarding ``own_did`` to it:
    a probe that has not come back after a third of ``probe_s`` (at least
    1 s) means so. ``send`` is the daemon's; ``closing`` says it drains."""
    wait_s = max(probe_s / 3, 1.0)
    while True:
        with trio.move_on_after(probe_s):
            await link.driver.closed.wait()
        if link.driver.closed.is_set() or closing():
            return
        link.relay_probe = probe = trio.Event()
        send(link, Outbound(typ=_PING, body=None, to=own_did))
        with trio.move_on_after(wait_s):
            await probe.wait()
        if link.driver.closed.is_set() or closing():
            return
        if not probe.is_set():
            log.warning("relay %s no longer forwards messages for %s to this link (did another connection "
                        "register under this DID, e.g. a caller using this daemon's identity?): closing it",
                        url, own_did)
            link.driver.close("the relay no longer forwards our messages to this link")
            return


def probe_returned(link: Link, sender: str, own_did: str) -> bool:
    """Is this PING our own probe, back through the relay (so it still
    forwards to us)? If so, :func:`watch` hears it."""
    if link.relay_probe is not None and sender == own_did:
        link.relay_probe.set()
        return True
    return False
