"""An agent behind an RFC 003 relay (``serve --relay URL`` when the relay
speaks RFC 003: ``ampcap relay`` or any other).

The link to such a relay is an ordinary AMPS (or WebSocket) connection: the
HANDSHAKE and HELLO register our DID there (R24), the relay pushes the
messages queued for us on it, and what we send on it (replies, our own
calls) the relay carries to their ``to``. So the link has no strict
principal binding (the messages on it come from many senders; each one's
signature is still checked, and it must be addressed to us) and asks for
recipient ACKs (``ConnectionConfig.relay_acks``): the dispatch adds one
ACK per message that is not itself an acknowledgement to the actions of
that message, so that, with a durable state store, the ACK leaves only
after the invoke's ``running``/``done`` journal row is committed (RFC 003
§5.5: the relay commits a message only when its recipient holds it).
Until then the relay pushes it again, and the journal and the idempotency
cache answer the redelivery with the same terminal reply.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import replace
from typing import TYPE_CHECKING

from ...peer.config import ConnectionConfig
from ...peer.outbound import Outbound
from ...wire.envelope import Envelope
from ...wire.registry import MessageType
from ..transport.url import AmpUrl

if TYPE_CHECKING:
    from ..daemon.link import Link
    from ..daemon.ports import Dialer

__all__ = ["relay_link_config", "join", "recipient_ack", "is_recipient_ack", "NOT_ACKED", "AcksAfterReplies",
           "RECEIPT_GRACE_S"]

RECEIPT_GRACE_S = 1.0
"""How long a caller leaving a relay link waits for the recipient ACKs of
its invokes: its agent sends each right after the reply, and the relay
pushes it at once while the caller is there, instead of queueing it for a
caller gone (where it would wait until it expires, a day by default)."""

log = logging.getLogger("ampcap.daemon")

_ACK = int(MessageType.ACK)
_TERMINAL = frozenset({int(MessageType.CAP_RESULT), int(MessageType.ERROR)})
# Never acknowledged: acknowledgements themselves (RFC 001: no ACK of an ACK),
# and the relay's own liveness answers.
NOT_ACKED = frozenset(int(t) for t in (MessageType.ACK, MessageType.PROC_OK, MessageType.PROC_FAIL,
                                       MessageType.PONG, MessageType.HELLO, MessageType.HELLO_ACK))


def relay_link_config(base: ConnectionConfig) -> ConnectionConfig:
    """``base`` as the link to an RFC 003 relay needs it (module docstring)."""
    return replace(base, strict_principal=False, relay_acks=True)


async def join(daemon: Dialer, url: str | AmpUrl, *, relay_did: str | None, timeout_s: float,
               ssl_context: ssl.SSLContext | None) -> Link:
    """Dial the relay and register there (HELLO) under the daemon's DID."""
    link = await daemon.connect(url, peer_did=relay_did, ssl_context=ssl_context, timeout_s=timeout_s,
                                config=relay_link_config(daemon.connection_config))
    # The relay answers what it accepts with a relay ACK (ack_source
    # "relay"), which the receive checks take only from a trusted relay: the
    # one we registered at is. (Every daemon has a pipeline; the port does
    # not name it, hence getattr.)
    pipeline = getattr(daemon, "pipeline", None)
    if pipeline is not None and link.peer_did is not None:
        pipeline.trusted_relays = pipeline.trusted_relays | {link.peer_did}
    log.info("registered at RFC 003 relay %s (%s) as %s", url, link.peer_did, daemon.identity.did)
    return link


def is_recipient_ack(body: object) -> bool:
    return type(body) is dict and body.get("ack_source") == "recipient"


def recipient_ack(env: Envelope, now_ms: int) -> Outbound:
    """The recipient ACK (RFC 003 §5.5) for ``env``: ``reply_to`` its id,
    addressed to its sender, ``ack_source = "recipient"``."""
    return Outbound(typ=_ACK, body={"ack_source": "recipient", "received_at": now_ms}, reply_to=env.id,
                    thread_id=env.thread_id, to=env.sender)


class AcksAfterReplies:
    """The recipient ACKs of invokes that came through a relay, each sent
    right after the invoke's terminal reply, on the same link.

    Why after the reply and not when the journal first holds the invoke:
    the relay commits the invoke when it takes the ACK, and never pushes it
    again. An ACK that left before the reply would leave the reply to
    chance: if the link (or the relay process on its other end) dies before
    the relay has taken the reply, nothing would bring it back. Sent after
    it on one link, the relay takes the reply before the ACK (frames are
    read in order, and each is on disk before the next is read), so a
    committed invoke always has its reply on the relay's disk; and an invoke
    whose ACK was lost is pushed again and answered from the journal and the
    idempotency cache (the same terminal bytes, then the ACK). A long
    invoke is pushed again meanwhile (every ``--redeliver`` of the relay)
    and answered PROCESSING.

    Bounded: at most ``limit`` invokes wait for their reply here; beyond
    that the oldest is forgotten, and the relay's redelivery asks again."""

    __slots__ = ("_waiting", "limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._waiting: dict[bytes, Outbound] = {}
        self.limit = limit

    def hold(self, env: Envelope, now_ms: int) -> None:
        """An invoke arrived on a relay link: its ACK waits for its terminal reply."""
        waiting = self._waiting
        waiting.pop(env.id, None)
        if len(waiting) >= self.limit:
            del waiting[next(iter(waiting))]
        waiting[env.id] = recipient_ack(env, now_ms)

    def after(self, out: Outbound) -> Outbound | None:
        """``out`` has just been sent on a relay link: the ACK to send after it, if it ends an invoke."""
        if out.reply_to is None or out.typ not in _TERMINAL:
            return None
        return self._waiting.pop(out.reply_to, None)

    def __len__(self) -> int:
        return len(self._waiting)
