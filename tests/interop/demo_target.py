"""A small, independent AMP target for the interop harness's own tests.

It serves only ``org.ampcap.demo.echo`` (1.0.0, 1.1.0, 2.0.0, legacy alias
``echo``) with just enough RFC 004 logic to answer every vector, and it can be
told to misbehave on chosen reply types: answer with the wrong ``reply_to``,
skip the reply, or send it twice. The harness must then report failing
exactly the vectors those faults break.

Transport and HELLO come from the project's sans-I/O ``Connection`` driven by
``ConnectionDriver``; the capability logic here is deliberately separate from
the daemon's executor, so the harness is checked against a second opinion.
It also runs as a relay *client* (raw framing, dialling out) for the relay tests.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ampcap.caps.demo import demo_manifest
from ampcap.caps.params import compile_schema
from ampcap.caps.semver import Range, Version
from ampcap.errors import AmpError
from ampcap.net.transport.listener import Listener
from ampcap.net.transport.clock import wall_clock_ms
from ampcap.net.transport.stream import ConnectionDriver
from ampcap.peer.config import ConnectionConfig
from ampcap.peer.connection import Connection, Role
from ampcap.peer.events import Event, MessageReceived
from ampcap.peer.outbound import Outbound
from ampcap.wire.envelope import Envelope
from ampcap.wire.frames import Framing
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import ReceivePipeline
from ampcap.wire.registry import MessageType
from ampcap.wire.signing import Profile

NAME = "org.ampcap.demo.echo"
ALIASES = {"echo": NAME}


@dataclass(frozen=True)
class Faults:
    """Reply types to corrupt: wrong reply_to, never sent, or sent twice."""

    wrong_reply_to: frozenset[int] = frozenset()
    skip: frozenset[int] = frozenset()
    duplicate: frozenset[int] = frozenset()


@dataclass
class EchoProvider:
    faults: Faults = field(default_factory=Faults)
    page_size: int | None = None  # declare at most this many per CAP_DECLARE, whatever the limit asked

    def __post_init__(self) -> None:
        specs = [s for s in demo_manifest().capabilities if s.name == NAME]
        self.specs = {s.version: s for s in specs}
        self.checks = {s.version: compile_schema(s.input_schema) for s in specs}

    # ---------------------------------------------------------------- replies

    def handle(self, env: Envelope, body: Any) -> list[Outbound]:
        try:
            if env.ext and any(isinstance(k, str) and "deleg" in k.lower() for k in env.ext):
                raise AmpError(3004, "delegation evidence outside the signed body")  # RFC 005 A.14
            if env.typ == MessageType.CAP_QUERY:
                typ, out = MessageType.CAP_DECLARE, self._query(body)
            elif env.typ == MessageType.CAP_INVOKE:
                typ, out = MessageType.CAP_RESULT, self._invoke(body)
            elif env.typ == MessageType.DELEG_REVOKE:
                from ampcap.deleg.bodies import parse_revoke_body

                parse_revoke_body(body)  # 4001 when the ids differ (RFC 005 A.13)
                typ, out = MessageType.PROC_OK, {}
            else:
                return []
        except AmpError as exc:
            typ, out = MessageType.ERROR, exc.to_body()
        return self._faulty(env, typ, out)

    def _faulty(self, env: Envelope, typ: int, body: Any) -> list[Outbound]:
        if typ in self.faults.skip:
            return []
        reply_to = bytes(16) if typ in self.faults.wrong_reply_to else env.id
        reply = Outbound(typ=typ, body=body, reply_to=reply_to, to=env.sender)
        return [reply, reply] if typ in self.faults.duplicate else [reply]

    # ---------------------------------------------------------------- queries

    def _query(self, body: Any) -> dict[str, Any]:
        flt = body.get("filter") if type(body) is dict else None
        if type(flt) is not dict:
            raise AmpError(1001, "CAP_QUERY needs a filter map")
        name = flt.get("capability") or ALIASES.get(flt.get("type"), flt.get("type"))
        if name != NAME:
            raise AmpError(4002, f"no capability {name!r}")
        versions = sorted(self.specs)
        if "version" in flt:
            wanted = Range.parse(flt["version"])
            versions = [v for v in versions if wanted.contains(v)]
            if not versions:
                raise AmpError(4003, "no declared version satisfies the range")
        if body.get("order", "newest-first") == "newest-first":
            versions.reverse()
        start = 0
        if "cursor" in body:
            cursor = body["cursor"]
            if type(cursor) is not str or not cursor.startswith("page:") or not cursor[5:].isdigit():
                raise AmpError(4001, "malformed cursor")
            start = int(cursor[5:])
        limit = body.get("limit", len(versions)) or len(versions)
        if self.page_size is not None:
            limit = min(limit, self.page_size)
        page = versions[start:start + limit]
        out: dict[str, Any] = {"capabilities": [self.specs[v].descriptor.to_wire() for v in page]}
        if start + limit < len(versions):
            out["next_cursor"] = f"page:{start + limit}"
        return out

    # -------------------------------------------------------------- invokes

    def _invoke(self, body: Any) -> dict[str, Any]:
        if type(body) is not dict or "params" not in body:
            raise AmpError(1001, "CAP_INVOKE needs params")
        if "delegation" in body:
            raise AmpError(3004, "delegation is not supported")
        version = self._select(body)
        self.checks[version].validate(body["params"])
        result = {"message": body["params"]["message"], "version": str(version)}
        if version.major == 2:
            result["length"] = len(result["message"])
        return {"status": "success", "result": result}

    def _select(self, body: dict[str, Any]) -> Version:
        if "id" in body:
            if "negotiate" in body:
                raise AmpError(4001, "id and negotiate are exclusive")
            name, _, text = str(body["id"]).partition(":")
            if ("capability" in body and body["capability"] != name) or \
                    ("version" in body and body["version"] != text):
                raise AmpError(4001, "id disagrees with capability/version")
            return self._exact(name, text)
        name = body.get("capability") or ALIASES.get(body.get("type"), body.get("type"))
        if "version" in body:
            return self._exact(name, body["version"])
        if name != NAME:
            raise AmpError(4002, f"no capability {name!r}")
        hints = body.get("negotiate")
        if type(hints) is not dict:
            raise AmpError(4001, "version or negotiate is required")
        for candidate in [hints.get("preferred"), *(hints.get("acceptable") or [])]:
            if candidate is not None and Version.parse(candidate) in self.specs:
                return Version.parse(candidate)
        if "range" in hints:
            wanted = Range.parse(hints["range"])
            inside = [v for v in self.specs if wanted.contains(v)]
            if inside:
                return max(inside)
        raise AmpError(4003, "no supported version matches the hints")

    def _exact(self, name: str | None, text: str) -> Version:
        if name != NAME:
            raise AmpError(4002, f"no capability {name!r}")
        version = Version.parse(text)
        if version not in self.specs:
            raise AmpError(4003, f"{NAME}:{text} is not offered")
        return version


# ------------------------------------------------------------------ running


def _config(raw: bool) -> ConnectionConfig:
    if raw:  # Rust-example compatibility: bare lengths, its Sig_Input, no HELLO
        return ConnectionConfig(framing=Framing.RAW, profile=Profile.RUST_EXAMPLE, strict_principal=False,
                                keepalive_interval_ms=None)
    return ConnectionConfig(keepalive_interval_ms=None)


def make_connection(identity: Identity, role: Role, *, raw: bool = False) -> Connection:
    profile = Profile.RUST_EXAMPLE if raw else Profile.RFC
    return Connection(role=role, identity=identity, entropy=os.urandom, config=_config(raw),
                      pipeline=ReceivePipeline(DidKeyResolver(), profile=profile))


def responder(driver: ConnectionDriver, provider: EchoProvider) -> Callable[[Event], Any]:
    async def on_event(event: Event) -> None:
        if isinstance(event, MessageReceived):
            for out in provider.handle(event.inbound.envelope, event.inbound.body):
                driver.send_nowait(out)
    return on_event


async def serve_target(provider: EchoProvider, identity: Identity, *, ssl_context: ssl.SSLContext | None = None,
                       task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Listen on 127.0.0.1 (any port, reported through ``task_status``)."""
    async def handler(driver: ConnectionDriver) -> None:
        driver.on_event = responder(driver, provider)
        await driver.run()

    listener = Listener(lambda: make_connection(identity, Role.SERVER), handler=handler, ssl_context=ssl_context)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(listener.serve_tcp, 0, "127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])


async def attach_to_relay(provider: EchoProvider, identity: Identity, port: int, relay_did: str,
                          *, task_status: trio.TaskStatus[ConnectionDriver] = trio.TASK_STATUS_IGNORED) -> None:
    """Dial the relay, register with a first frame (a HELLO addressed to the
    relay's DID, the way the Rust example clients do), then answer what arrives."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    driver = ConnectionDriver(make_connection(identity, Role.CLIENT, raw=True), stream)
    driver.on_event = responder(driver, provider)
    driver.conn.start(wall_clock_ms())  # raw framing: OPEN at once, no HELLO exchange
    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver.run)
        driver.send_nowait(Outbound(typ=MessageType.HELLO, body={"versions": ["0.30.0"]}, to=relay_did))
        task_status.started(driver)
