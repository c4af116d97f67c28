"""Building blocks for relay tests: identities, a relay over a real state
store, messages and ACKs signed the way agents sign them."""

from __future__ import annotations

import os
import random
from typing import Any

from ampcap.relay import RelayConfig, RelayCore, RelayRoutes
from ampcap.store.database import StateStore
from ampcap.store.relay_queue import StoreRelayQueue
from ampcap.wire.envelope import seal
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.registry import MessageType

NOW = 1_800_000_000_000


def ident(n: int) -> Identity:
    return Identity.from_seed(bytes([n]) * 32)


def make_relay(store: StateStore, *, n: int = 100, routes: RelayRoutes | None = None, owner: str = "relay",
               seed: int = 7, **config: Any) -> RelayCore:
    identity = ident(n)
    return RelayCore(RelayConfig(relay_did=identity.did, **config), identity, StoreRelayQueue(store),
                     DidKeyResolver(), entropy=os.urandom, random=random.Random(seed).random, routes=routes,
                     owner=owner)


def message(sender: Identity, to: str | list[str], *, now: int = NOW, ttl: int = 60_000, text: str = "hi",
            typ: int = int(MessageType.MESSAGE), body: Any = None) -> tuple[bytes, bytes]:
    """(message id, raw bytes)."""
    env, raw = seal(sender, typ=typ, to=to, body=body if body is not None else {"text": text}, now_ms=now,
                    entropy=os.urandom, ttl=ttl)
    return env.id, raw


def recipient_ack(recipient: Identity, original_sender: str, msg_id: bytes, *, now: int = NOW,
                  source: str = "recipient", typ: int = int(MessageType.ACK)) -> bytes:
    body: Any = {"ack_source": source, "received_at": now} if typ == int(MessageType.ACK) else None
    _, raw = seal(recipient, typ=typ, to=original_sender, body=body, now_ms=now, entropy=os.urandom,
                  ttl=60_000, reply_to=msg_id)
    return raw

