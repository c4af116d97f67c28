"""Helpers for executor/invoker tests: real signed messages (so fingerprints
are the pipeline's own), and a capability resolver/registry over the demo
manifest standing in for ``caps/negotiate.py`` and ``caps/registry.py``."""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.manifest import CapabilitySpec, Manifest
from ampcap.caps.params import ParamsValidator
from ampcap.errors import AmpError
from ampcap.peer.executor import Executor, ExecutorConfig, QueryPage, Resolved
from ampcap.peer.limits import InFlightLimits
from ampcap.peer.outbound import Outbound, Send
from ampcap.peer.policy import ALLOW_ALL, Policy
from ampcap.peer.sealing import Sealer
from ampcap.caps.bodies import InvokeRequest, QueryRequest
from ampcap.wire.envelope import seal
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import Inbound, ReceivePipeline
from ampcap.wire.registry import MessageType

T0 = 1_763_800_000_000
INVOKE, RESULT, ERROR = int(MessageType.CAP_INVOKE), int(MessageType.CAP_RESULT), int(MessageType.ERROR)
QUERY, DECLARE = int(MessageType.CAP_QUERY), int(MessageType.CAP_DECLARE)

_IDS: dict[int, Identity] = {}


def ident(seed: int) -> Identity:
    if seed not in _IDS:
        _IDS[seed] = Identity.from_seed(bytes([seed]) * 32)
    return _IDS[seed]


ALICE, BOB, PROVIDER = ident(1), ident(2), ident(3)
_rng = random.Random(1234)


def entropy(n: int) -> bytes:
    return _rng.randbytes(n)


# The provider's signature on the terminal replies the executor seals itself (R8).
SEAL = Sealer(PROVIDER, entropy, DidKeyResolver())


def message(sender: Identity, typ: int, body: Any, now: int = T0, *, msg_id: bytes | None = None,
            ts: int | None = None, reply_to: bytes | None = None, thread_id: bytes | None = None,
            ext: dict[str, Any] | None = None, ttl: int = 600_000, to: str | None = None,
            pipeline: ReceivePipeline | None = None) -> Inbound:
    """Seal a message and pass it through a real receive pipeline (a fresh
    one unless given: pass one to keep its replay cache across messages)."""
    ts = now if ts is None else ts
    _, wire = seal(sender, typ=typ, to=to or PROVIDER.did, body=body, now_ms=ts, entropy=entropy, ttl=ttl,
                   reply_to=reply_to, thread_id=thread_id, ext=ext, message_id=msg_id)
    return (pipeline or ReceivePipeline(DidKeyResolver())).check(wire, now)


def deliver(sender: Identity, out: Outbound, now: int, *, to: str | None = None) -> Inbound:
    """What a Connection honouring ``Outbound.ts_ms`` / ``msg_id`` would put on the wire."""
    return message(sender, out.typ, out.body, now, msg_id=out.msg_id, ts=out.ts_ms, reply_to=out.reply_to,
                   thread_id=out.thread_id, ttl=out.ttl_ms or 600_000, to=to or (out.to if isinstance(out.to, str) else None))


# ------------------------------------------------ demo-backed collaborators

_MANIFEST: Manifest | None = None


def manifest() -> Manifest:
    global _MANIFEST
    if _MANIFEST is None:
        _MANIFEST = demo_manifest()
    return _MANIFEST


class DemoResolver:
    """RFC 004 §6.3 selection over the demo set (a stand-in for caps/negotiate)."""

    def __init__(self, m: Manifest) -> None:
        self.specs = m.capabilities
        self.aliases = {a: c.name for c in self.specs for a in c.aliases}

    def canonical_name(self, name: str) -> str:
        return self.aliases.get(name, name)

    def resolve_identity(self, request: InvokeRequest) -> list[CapabilitySpec]:
        name = self.canonical_name(request.name)
        found = [c for c in self.specs if c.name == name]
        if not found:
            raise AmpError(4002, "capability not found")
        return found

    def check_version(self, target: list[CapabilitySpec], request: InvokeRequest) -> Resolved:
        by_version = {c.version: c for c in target}
        chosen = None
        if request.version is not None:
            chosen = by_version.get(request.version)
        elif request.negotiate is not None:
            hints = request.negotiate
            if hints.preferred in by_version:
                chosen = by_version[hints.preferred]
            else:
                chosen = next((by_version[v] for v in hints.acceptable if v in by_version), None)
                if chosen is None and hints.range is not None:
                    fits = [v for v in by_version if hints.range.contains(v)]
                    chosen = by_version[max(fits)] if fits else None
        if chosen is None:
            raise AmpError(4003, "no compatible version")
        return Resolved(descriptor=chosen.descriptor, params=request.params, binding=chosen.binding)


class DemoRegistry:
    def __init__(self, resolver: DemoResolver) -> None:
        self.resolver = resolver

    def query(self, request: QueryRequest, now_ms: int, *, allowed: Any = None) -> QueryPage:
        if request.cursor is not None:
            raise AmpError(4001, "invalid cursor")
        name = self.resolver.canonical_name(request.name)
        found = [c for c in self.resolver.specs if c.name == name]
        if not found:
            raise AmpError(4002, "capability not found")
        if request.version_range is not None:
            found = [c for c in found if request.version_range.contains(c.version)]
            if not found:
                raise AmpError(4003, "no version in range")
        found.sort(key=lambda c: c.version, reverse=request.order == "newest-first")
        limit = request.limit or len(found)
        return QueryPage(descriptors=tuple(c.descriptor for c in found[:limit]),
                         next_cursor="more" if len(found) > limit else None)


def make_executor(policy: Policy = ALLOW_ALL, limits: InFlightLimits | None = None,
                  config: ExecutorConfig = ExecutorConfig(), seal: Sealer = SEAL) -> Executor:
    m = manifest()
    resolver = DemoResolver(m)
    return Executor(registry=DemoRegistry(resolver), resolver=resolver, params=ParamsValidator(m.schema_store()),
                    policy=policy, limits=limits, config=config, seal=seal)


def catalog_executor(policy: Policy = ALLOW_ALL) -> Executor:
    """An executor over the daemon's real :class:`Catalog` (aliases, OSSA
    URIs, the registry's query) rather than the stand-ins above."""
    m = manifest()
    catalog = Catalog(list(m.capabilities), cursor_key=bytes(32))
    return Executor(registry=catalog, resolver=catalog, params=ParamsValidator(m.schema_store()), policy=policy,
                    seal=SEAL)


def sends(actions: list[Any], typ: int | None = None) -> list[Send]:
    return [a for a in actions if isinstance(a, Send) and (typ is None or a.out.typ == typ)]


def only_send(actions: list[Any]) -> Send:
    found = sends(actions)
    assert len(found) == 1, actions
    return found[0]


def conn_of(name: str) -> Hashable:
    return name
