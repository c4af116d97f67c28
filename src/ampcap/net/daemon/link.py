"""One connection as the daemon sees it: :class:`Link`.

A link wraps the connection's :class:`~ampcap.net.transport.stream.ConnectionDriver`
with what the daemon learns about it along the way (who dialled, the peer's
GOAWAY, messages that failed signature verification, a relay probe in
flight). The executor and the invoker key their per-connection state by it,
so it keeps object identity for equality and hashing.

The helpers here describe a link in log lines and error messages; they read
it, never change it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import trio

from ...display import shown
from ...peer.events import GoAwayReceived
from ...wire.signing import Profile
from ..transport.stream import ConnectionDriver

__all__ = ["Link", "agreed_extensions", "peer_label", "why_silent"]


class Link(msgspec.Struct, eq=False):
    """One connection as the daemon sees it (also its executor/invoker key:
    ``eq=False`` keeps object identity for equality and hashing)."""

    driver: ConnectionDriver
    outbound: bool  # we dialled it
    ready: trio.Event = msgspec.field(default_factory=trio.Event)  # Negotiated or terminated
    calls: set[bytes] = msgspec.field(default_factory=set)  # our pending call handles on it (what Calls.end_on fails)
    opened_ms: int = 0
    goaway: GoAwayReceived | None = None  # the peer's GOAWAY, once it sent one
    unverified: int = 0  # messages on it whose signature did not verify (1002): why a reply may never come
    verifies_under: Profile | None = None  # the other Sig_Input profile one of them verified under
    receipts_owed: int = 0  # an RFC 003 relay link: our invokes whose recipient ACK has not come back yet
    relay_probe: trio.Event | None = None  # a relay link's pending self-addressed probe (net/features/forwarding_relay.py)
    # Who hears a CAP_DECLARE the peer sends unasked (no reply_to): its
    # body, already checked against the CDDL (the MCP gateway re-lists).
    on_declare: Callable[[Any], None] | None = None
    relay_acks: bool = False  # a link to an RFC 003 relay: acknowledge what arrives (net/features/relay_agent.py)

    @property
    def peer_closing(self) -> str:
        """What the peer did when it closed its side, as messages say it
        (why a dial or a call on this link failed)."""
        return "the peer closed the connection" + (" (GOAWAY)" if self.goaway is not None else "")

    @property
    def peer_did(self) -> str | None:
        return self.driver.conn.peer_did

    @property
    def open(self) -> bool:
        return self.driver.terminated is None and self.driver.conn.peer_did is not None


def peer_label(link: Link) -> str:
    """The link's peer for a log line: its DID (cut short), or '-' before HELLO named it."""
    return shown(link.peer_did) if link.peer_did is not None else "-"


def agreed_extensions(conn: Any) -> frozenset[str]:
    """The ampcap extensions agreed in HELLO where a message came from: a
    link's, or none for an HTTP POST's reply sink, which has no connection
    (and no HELLO) of its own (wire/extensions.py)."""
    driver = getattr(conn, "driver", None)
    return driver.conn.extensions if driver is not None else frozenset()


def why_silent(link: Link | None) -> str:
    """What a timed-out call's message adds when the peer did answer on
    its link, but with messages whose signature did not verify: they
    were dropped, and the reply may have been among them."""
    if link is None or not link.unverified:
        return ""
    count = link.unverified
    why = (f"; {count} message{'s' if count > 1 else ''} from the peer failed signature verification (1002) "
           f"and {'were' if count > 1 else 'was'} dropped")
    if link.verifies_under is Profile.RUST_EXAMPLE:
        why += (": they verify under the public Rust example's Sig_Input, so the peer signs like it; "
                "use its profile too (--compat rust-example)")
    elif link.verifies_under is Profile.RFC:
        why += (": they verify under the RFC's Sig_Input, so the peer does not sign like the Rust example; "
                "drop --compat rust-example")
    return why
