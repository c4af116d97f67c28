"""Shared helpers for connection tests: identities, pipelines and a pair of
Connections that shuttle bytes to each other (no sockets)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ampcap.peer.config import ConnectionConfig
from ampcap.peer.connection import Connection, Role
from ampcap.peer.events import Event
from ampcap.peer.outbound import Outbound  # noqa: F401 - re-exported for the connection tests
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import ReceivePipeline

T0 = 1_763_800_000_000  # a fixed Unix ms time for sans-I/O tests


def entropy_from(seed: int):
    rng = random.Random(seed)
    return lambda n: rng.randbytes(n)


_IDENTITIES: dict[int, Identity] = {}


def identity(seed: int) -> Identity:
    if seed not in _IDENTITIES:
        _IDENTITIES[seed] = Identity.from_seed(bytes([seed]) * 32)
    return _IDENTITIES[seed]


def make_conn(role: Role, seed: int, config: ConnectionConfig | None = None, **kw: Any) -> Connection:
    return Connection(role=role, identity=identity(seed), pipeline=ReceivePipeline(DidKeyResolver()),
                      config=config or ConnectionConfig(), entropy=entropy_from(seed * 7919), **kw)


def drain_events(conn: Connection) -> list[Event]:
    out = []
    while (ev := conn.next_event()) is not None:
        out.append(ev)
    return out


@dataclass
class Pair:
    client: Connection
    server: Connection
    now: int = T0
    client_events: list[Event] = field(default_factory=list)
    server_events: list[Event] = field(default_factory=list)

    def shuttle(self) -> None:
        """Move bytes both ways until neither side has anything to say."""
        for _ in range(100):
            a = self.client.data_to_send()
            if a:
                self.server.receive_data(a, self.now)
            b = self.server.data_to_send()
            if b:
                self.client.receive_data(b, self.now)
            self.client_events += drain_events(self.client)
            self.server_events += drain_events(self.server)
            if not a and not b:
                return
        raise AssertionError("connections never went quiet")


def open_pair(client_cfg: ConnectionConfig | None = None, server_cfg: ConnectionConfig | None = None,
              **client_kw: Any) -> Pair:
    pair = Pair(make_conn(Role.CLIENT, 1, client_cfg, **client_kw), make_conn(Role.SERVER, 2, server_cfg))
    pair.client.start(pair.now)
    pair.server.start(pair.now)
    pair.shuttle()
    return pair
