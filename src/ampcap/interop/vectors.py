"""The scenario vectors ``ampcap interop`` drives against a target.

Each vector is one coroutine: open a fresh connection, send what the RFC
appendix describes, and judge what came back: the exact AMP code, the
``reply_to`` correlation and the number of terminal replies (exactly one).
Vector ids follow the suite's convention (``002:A.1``, ``004:A.14``); the
RFC 001 checks that have no appendix letter are named after what they test
(``001:hello``, ``001:1002``).

A vector that needs something the target does not offer (a capability with
two versions, an alias, raw framing forbidding HELLO…) returns ``skip`` with
a note saying what was missing, never a silent pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from ..caps.descriptor import Descriptor
from ..caps.semver import Version
from ..errors import AmpError
from ..net.transport.url import AmpUrl
from ..wire.frames import FrameType
from ..wire.registry import MessageType
from .judge import (Outcome, Status, expect_error, expect_message, expect_rejection, expect_success, failed, passed,
                    single_terminal, skipped)
from .probe import RUST_EXAMPLE_MAX_FRAME, Exchange, Probe, ProbeError, ProbeSettings, Received

__all__ = ["Status", "Outcome", "Subject", "Context", "Vector", "VECTORS", "DEMO_SUBJECT",
           "vector_ids"]

_UNKNOWN_TYP = 0x7E  # unassigned in RFC 001 §4.3
_NONEXISTENT = "org.agentries.nonexistent"  # the name RFC 004 A.17 uses
_SKEW_MS = 600_000  # far outside any sane clock-skew window (RFC 001 §8.3)
_CODE_4003 = bytes.fromhex("64636f6465190fa3")  # "code": 4003 (RFC 004 A.23)
_CODE_3004 = bytes.fromhex("64636f6465190bbc")  # "code": 3004


@dataclass(slots=True, kw_only=True)
class Subject:
    """The capability the RFC 004 vectors exercise, and what is known of it.

    ``params`` must be valid input for it; ``invalid_params`` must miss a
    required field (A.6); ``alias`` is a legacy ``type`` that maps to it (A.7).
    ``versions`` is filled from the target's CAP_DECLARE during discovery.
    """

    name: str
    pinned_version: str | None = None
    params: Any = None
    invalid_params: Any = None
    alias: str | None = None
    versions: list[Version] = field(default_factory=list)
    discovery_note: str = ""

    @property
    def known(self) -> bool:
        return bool(self.versions)

    def by_id_version(self) -> str:
        return self.pinned_version or str(max(self.versions))


def demo_subject() -> Subject:
    """``org.ampcap.demo.echo``: what an ampcap ``serve --demo`` target offers."""
    return Subject(name="org.ampcap.demo.echo", params={"message": "interop"}, invalid_params={},
                   alias="echo")


DEMO_SUBJECT = "org.ampcap.demo.echo"


@dataclass(slots=True, kw_only=True)
class Context:
    """Everything a vector needs to reach and judge the target."""

    url: AmpUrl
    settings: ProbeSettings
    subject: Subject
    target_did: str | None = None  # required under raw framing: nothing tells us
    target_info: dict[str, Any] | None = None
    relay: AmpUrl | None = None  # --relay: the RFC 003 relay the relay vectors test
    relay_did: str | None = None  # its DID (--relay-did, or learned from its ERROR in 003:A.1)
    relay_framing: str = "raw"  # "raw" (the Rust example's relay) or "rfc002"
    relay_forward: str | None = None  # http(s) URL of its relay-forward endpoint (default: the relay's host:port)
    relay_error_raw: bytes | None = None  # the relay's ERROR 2003 (A.1), for A.15
    relay_forward_raw: bytes | None = None  # its relay-forward-response refusing A.5, for A.15
    relay_upstream: Any = None  # the Identity the harness hands off as (a relay the relay under test trusts)

    @property
    def raw(self) -> bool:
        return self.settings.raw

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Probe]:
        """A fresh connection (no handshake yet)."""
        probe = await Probe.open(self.url, self.settings)
        probe.peer_did = self.target_did
        try:
            yield probe
        finally:
            await probe.aclose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Probe]:
        """A fresh connection on which application messages may flow."""
        async with self.connect() as probe:
            await probe.open_session()
            if probe.peer_did is None:
                raise ProbeError("the target's DID is unknown (give --target-did)")
            yield probe


VectorFn = Callable[[Context], Awaitable[Outcome]]


@dataclass(frozen=True, slots=True)
class Vector:
    id: str
    title: str
    run: VectorFn


# ------------------------------------------------------------- RFC 002


async def v002_a1(ctx: Context) -> Outcome:
    """A.1: a correctly framed message, delivered one byte per write, is
    parsed as exactly one AMP_MESSAGE (the target answers it once)."""
    async with ctx.session() as probe:
        env, wire = probe.seal(MessageType.CAP_QUERY, {"filter": {"capability": ctx.subject.name}})
        await probe.send_bytes(probe.frame(wire), chunk=1)
        ex = await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))
        reply = single_terminal(ex)
        return reply if isinstance(reply, Outcome) else passed(f"one reply to a byte-by-byte frame: {reply.describe()}")


async def v002_a2(ctx: Context) -> Outcome:
    """A.2: ``0000000401a1617801`` (length 4 where 5 would be right) is rejected."""
    if ctx.raw:
        return skipped("RFC 002 frame-type framing vector; raw framing (--compat rust-example) has no type byte")
    if ctx.settings.binding != "amps":
        return skipped("TCP framing vector; a WebSocket message or an HTTP body delimits the message itself")
    async with ctx.session() as probe:
        await probe.send_bytes(bytes.fromhex("0000000401a1617801"))
        ex = await probe.collect(None, frozenset())
        return expect_rejection(ex, 1001)


async def v002_a5(ctx: Context) -> Outcome:
    """A.5: a payload one byte over the effective maximum is refused
    (transport ERROR then close, or close)."""
    async with ctx.session() as probe:
        if ctx.raw:
            limit = RUST_EXAMPLE_MAX_FRAME
            header = limit + 1
        elif ctx.settings.websocket:  # one WebSocket message one byte over the size we announced
            limit = probe.settings.max_msg_size
            header = limit + 1
        elif ctx.settings.binding == "http":  # a POST body over the size the target announced: 413
            limit = max(probe.handshake_response.max_msg_size if probe.handshake_response else 0, 1 << 20)
            header = limit + 2
        else:
            theirs = probe.handshake_response.max_msg_size if probe.handshake_response else 0
            limit = max(min(probe.settings.max_msg_size, theirs), 1 << 20)
            header = limit + 2  # the length counts the frame-type byte
        frame = header.to_bytes(4, "big") + (b"" if ctx.raw or ctx.settings.websocket
                                              else bytes((FrameType.AMP_MESSAGE,)))
        payload = bytes(limit + 1)
        ex: Exchange | None = None
        async with trio.open_nursery() as nursery:
            # Write and read at once: a target that refuses from the header may
            # close while we are still writing, and its ERROR must still be read.
            nursery.start_soon(probe.send_bytes, frame + payload)
            ex = await probe.collect(None, frozenset())
            nursery.cancel_scope.cancel()
        note = (f" (raw framing: the Rust example's {limit}-byte frame limit)" if ctx.raw
                else f" (effective maximum {limit} bytes)")
        outcome = expect_rejection(ex, 1001)
        return Outcome(outcome.status, outcome.notes + note)


async def v002_a7(ctx: Context) -> Outcome:
    """A.7: a MESSAGE after the transport handshake but before HELLO is a
    protocol violation (1004, or 1001 by binding-local mapping)."""
    if ctx.raw:
        return skipped("raw framing has no HELLO phase (the Rust example never negotiates)")
    if ctx.settings.binding == "http":
        return skipped("HTTP POST may skip HELLO (RFC 002 §3.3): no pre-HELLO phase to violate")
    async with ctx.connect() as probe:
        await probe.handshake()
        env = await probe.send_message(MessageType.MESSAGE, {"text": "before HELLO"},
                                       to=ctx.target_did or None)
        ex = await probe.collect(env, frozenset())
        return expect_rejection(ex, 1004, 1001)


# ------------------------------------------------------------- RFC 001


async def v001_hello(ctx: Context) -> Outcome:
    """§13: HELLO offering 1.0 gets one HELLO_ACK (v = 1, reply_to = HELLO id)
    selecting a version of major 1."""
    if ctx.raw:
        return skipped("no HELLO exchange under --compat rust-example (the example relay never answers one)")
    async with ctx.connect() as probe:
        await probe.handshake()
        hello, ex = await probe.hello(("1.0",))
        reply = expect_message(ex, MessageType.HELLO_ACK)
        if isinstance(reply, Outcome):
            return reply
        env = reply.envelope
        assert env is not None
        if env.v != 1:
            return failed(f"HELLO_ACK has v = {env.v}; the HELLO family always uses v = 1")
        selected = env.body.get("selected") if type(env.body) is dict else None
        if type(selected) is not str or selected.split(".", 1)[0] != "1":
            return failed(f"HELLO_ACK selected {selected!r}, not a version of major 1")
        if probe.peer_info is not None and ctx.target_info is None:
            ctx.target_info = probe.peer_info
        return passed(f"HELLO_ACK selected {selected} from {env.sender}")


async def v001_hello_reject(ctx: Context) -> Outcome:
    """§13.5: a HELLO offering only an unsupported major gets HELLO_REJECT."""
    if ctx.raw:
        return skipped("no HELLO exchange under --compat rust-example (the example relay never answers one)")
    async with ctx.connect() as probe:
        await probe.handshake()
        _, ex = await probe.hello(("99.0",))
        reply = expect_message(ex, MessageType.HELLO_REJECT)
        if isinstance(reply, Outcome):
            return reply
        return passed("HELLO_REJECT for a HELLO offering only 99.0")


def _query(ctx: Context) -> dict[str, Any]:
    return {"filter": {"capability": ctx.subject.name}}


async def _rejected_query(ctx: Context, code: int, **seal_kwargs: Any) -> Outcome:
    async with ctx.session() as probe:
        typ = seal_kwargs.pop("typ", MessageType.CAP_QUERY)
        body = seal_kwargs.pop("body", _query(ctx))
        env = await probe.send_message(typ, body, **seal_kwargs)
        ex = await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))
        return expect_error(ex, code)


async def v001_bad_signature(ctx: Context) -> Outcome:
    """§8.2/§15: a message whose signature does not verify gets ERROR 1002."""
    return await _rejected_query(ctx, 1002, corrupt_signature=True)


async def v001_expired(ctx: Context) -> Outcome:
    """§8.3: ``ts + ttl`` long past gets ERROR 1003."""
    async with ctx.session() as probe:
        env = await probe.send_message(MessageType.CAP_QUERY, _query(ctx),
                                       ts_ms=probe.now_ms() - _SKEW_MS, ttl_ms=60_000)
        ex = await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))
        return expect_error(ex, 1003)


async def v001_future(ctx: Context) -> Outcome:
    """§8.3: ``ts`` beyond the allowed clock skew gets ERROR 1003."""
    async with ctx.session() as probe:
        env = await probe.send_message(MessageType.CAP_QUERY, _query(ctx), ts_ms=probe.now_ms() + _SKEW_MS)
        ex = await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))
        return expect_error(ex, 1003)


async def v001_bad_version(ctx: Context) -> Outcome:
    """§13.1: after negotiating major 1, ``v = 2`` gets ERROR 1004."""
    return await _rejected_query(ctx, 1004, v=2)


async def v001_unknown_type(ctx: Context) -> Outcome:
    """§13.4: an unknown ``typ`` gets ERROR 1005."""
    return await _rejected_query(ctx, 1005, typ=_UNKNOWN_TYP, body={})


# ------------------------------------------------------------- RFC 004

_INVOKE_TERMINAL = frozenset({MessageType.CAP_RESULT})
_INVOKE_INTERIM = frozenset({MessageType.ACK, MessageType.PROCESSING, MessageType.PROGRESS})


async def _invoke(ctx: Context, body: dict[str, Any]) -> Exchange:
    async with ctx.session() as probe:
        env = await probe.send_message(MessageType.CAP_INVOKE, body)
        return await probe.collect(env, _INVOKE_TERMINAL, interim_types=_INVOKE_INTERIM)


async def _declare(ctx: Context, body: dict[str, Any]) -> Exchange:
    async with ctx.session() as probe:
        env = await probe.send_message(MessageType.CAP_QUERY, body)
        return await probe.collect(env, frozenset({MessageType.CAP_DECLARE}))


def _needs_subject(ctx: Context, *, params: bool = False, versions: int = 1) -> Outcome | None:
    s = ctx.subject
    if not s.known:
        return skipped(f"the target declares no {s.name!r} ({s.discovery_note or 'unknown'}); "
                       "name one it offers with --capability")
    if params and s.params is None:
        return skipped(f"no valid params known for {s.name!r}; give them with --params JSON")
    if len(s.versions) < versions:
        return skipped(f"{s.name!r} declares {len(s.versions)} version(s); this vector needs {versions}")
    return None


def _check_declare(reply: Received, name: str | None) -> tuple[list[Descriptor], Outcome | None]:
    body = reply.envelope.body if reply.envelope is not None else None
    caps = body.get("capabilities") if type(body) is dict else None
    if type(caps) is not list or not caps:
        return [], failed("CAP_DECLARE body has no non-empty 'capabilities' array")
    out: list[Descriptor] = []
    for i, raw in enumerate(caps):
        try:
            d = Descriptor.from_wire(raw, path=f"capabilities[{i}]")
        except AmpError as exc:
            return [], failed(f"descriptor does not validate: {exc}")
        if name is not None and d.name != name:
            return [], failed(f"declared {d.name!r}, expected the canonical name {name!r}")
        out.append(d)
    return out, None


async def v004_a1(ctx: Context) -> Outcome:
    """A.1: the CAP_DECLARE answering a CAP_QUERY carries descriptors that
    validate (``id == name:version``, schema refs, hash sizes)."""
    ex = await _declare(ctx, _query(ctx))
    if len(ex.terminals) == 1 and ex.terminals[0].error_code == 4002:
        return skipped(f"the target does not declare {ctx.subject.name!r}; name one it offers with --capability")
    reply = expect_message(ex, MessageType.CAP_DECLARE)
    if isinstance(reply, Outcome):
        return reply
    descriptors, bad = _check_declare(reply, ctx.subject.name)
    if bad is not None:
        return bad
    return passed(f"{len(descriptors)} descriptor(s) validate: " + ", ".join(d.id for d in descriptors))


def _versions_sorted(ctx: Context) -> list[Version]:
    return sorted(ctx.subject.versions)


def _unsupported_major(ctx: Context) -> int:
    return max(v.major for v in ctx.subject.versions) + 50


async def v004_a2(ctx: Context) -> Outcome:
    """A.2: the preferred version, when supported, is the one selected (we
    prefer the oldest declared version, so "newest wins" does not pass)."""
    if (skip := _needs_subject(ctx, params=True, versions=2)) is not None:
        return skip
    want = str(_versions_sorted(ctx)[0])
    ex = await _invoke(ctx, {"capability": ctx.subject.name, "negotiate": {"preferred": want},
                             "params": ctx.subject.params})
    return expect_success(ex, want)


async def v004_a3(ctx: Context) -> Outcome:
    """A.3: an unsupported preferred version falls back to the first
    acceptable version the provider supports."""
    if (skip := _needs_subject(ctx, params=True)) is not None:
        return skip
    versions = _versions_sorted(ctx)
    missing = _unsupported_major(ctx)
    want = str(versions[0])
    acceptable = [f"{missing}.1.0", want] + ([str(versions[-1])] if len(versions) > 1 else [])
    ex = await _invoke(ctx, {"capability": ctx.subject.name,
                             "negotiate": {"preferred": f"{missing}.0.0", "acceptable": acceptable},
                             "params": ctx.subject.params})
    return expect_success(ex, want)


async def v004_a4(ctx: Context) -> Outcome:
    """A.4: a range no declared version satisfies gets ERROR 4003."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    m = _unsupported_major(ctx)
    ex = await _invoke(ctx, {"capability": ctx.subject.name, "negotiate": {"range": f">={m}.0.0 <{m + 1}.0.0"},
                             "params": ctx.subject.params if ctx.subject.params is not None else {}})
    return expect_error(ex, 4003)


async def v004_a5(ctx: Context) -> Outcome:
    """A.5: valid params get exactly one CAP_RESULT(status="success")."""
    if (skip := _needs_subject(ctx, params=True)) is not None:
        return skip
    ident = f"{ctx.subject.name}:{ctx.subject.by_id_version()}"
    return expect_success(await _invoke(ctx, {"id": ident, "params": ctx.subject.params}))


async def v004_a6(ctx: Context) -> Outcome:
    """A.6: params missing a required field get ERROR 4004."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    if ctx.subject.invalid_params is None:
        return skipped("no invalid params known; give a capability with a required field via --capability")
    ident = f"{ctx.subject.name}:{ctx.subject.by_id_version()}"
    return expect_error(await _invoke(ctx, {"id": ident, "params": ctx.subject.invalid_params}), 4004)


async def v004_a7(ctx: Context) -> Outcome:
    """A.7: a CAP_QUERY by legacy ``type`` is accepted and answered with the
    canonical capability name."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    if ctx.subject.alias is None:
        return skipped("no legacy alias known for the capability; give one with --alias")
    ex = await _declare(ctx, {"filter": {"type": ctx.subject.alias}})
    reply = expect_message(ex, MessageType.CAP_DECLARE)
    if isinstance(reply, Outcome):
        return reply
    descriptors, bad = _check_declare(reply, ctx.subject.name)
    return bad or passed(f"type {ctx.subject.alias!r} resolved to {ctx.subject.name!r}")


async def v004_a8(ctx: Context) -> Outcome:
    """A.8: ``id`` disagreeing with ``capability``/``version`` gets ERROR 4001."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    ident = f"{ctx.subject.name}:{ctx.subject.by_id_version()}"
    body = {"id": ident, "capability": "org.agentries.translate", "version": "1.0.0",
            "params": ctx.subject.params if ctx.subject.params is not None else {}}
    return expect_error(await _invoke(ctx, body), 4001)


async def v004_a14(ctx: Context) -> Outcome:
    """A.14: pages of ``limit`` descriptors, followed by cursor, list every
    declared version once, ordered (name ASC, version DESC)."""
    if (skip := _needs_subject(ctx, versions=2)) is not None:
        return skip
    total = len(ctx.subject.versions)
    limit = 1 if total < 3 else 2
    seen: list[Version] = []
    cursor: str | None = None
    async with ctx.session() as probe:
        for _ in range(total + 1):
            body: dict[str, Any] = {**_query(ctx), "limit": limit, "order": "newest-first"}
            if cursor is not None:
                body["cursor"] = cursor
            env = await probe.send_message(MessageType.CAP_QUERY, body)
            reply = expect_message(await probe.collect(env, frozenset({MessageType.CAP_DECLARE})),
                                    MessageType.CAP_DECLARE)
            if isinstance(reply, Outcome):
                return reply
            descriptors, bad = _check_declare(reply, ctx.subject.name)
            if bad is not None:
                return bad
            if len(descriptors) > limit:
                return failed(f"a page holds {len(descriptors)} descriptors, over limit={limit}")
            seen += [d.version for d in descriptors]
            nxt = reply.envelope.body.get("next_cursor") if reply.envelope is not None else None
            if nxt is None:
                break
            if type(nxt) is not str:
                return failed(f"next_cursor is not text: {nxt!r:.60}")
            cursor = nxt
        else:
            return failed(f"more than {total} pages for {total} descriptors")
    if len(seen) < total and cursor is None:
        return skipped(f"a partial page without a continuation cursor ({len(seen)} of {total}); "
                       "RFC 004 CAP_DECLARE names none, ampcap uses 'next_cursor' (R7)")
    expected = sorted(ctx.subject.versions, reverse=True)
    if seen != expected:
        return failed(f"pages listed {[str(v) for v in seen]}, expected {[str(v) for v in expected]}")
    return passed(f"{total} descriptors in pages of {limit}, newest first, no duplicates or gaps")


async def v004_a15(ctx: Context) -> Outcome:
    """A.15: a malformed cursor gets ERROR 4001."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    return expect_error(await _declare(ctx, {**_query(ctx), "cursor": "%%not-a-cursor%%", "limit": 1}), 4001)


async def v004_a16(ctx: Context) -> Outcome:
    """A.16: ``id`` together with ``negotiate`` gets ERROR 4001."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    version = ctx.subject.by_id_version()
    body = {"id": f"{ctx.subject.name}:{version}", "negotiate": {"preferred": version},
            "params": ctx.subject.params if ctx.subject.params is not None else {}}
    return expect_error(await _invoke(ctx, body), 4001)


async def v004_a17(ctx: Context) -> Outcome:
    """A.17: a query for a capability nobody declares gets ERROR 4002, not an
    empty CAP_DECLARE."""
    return expect_error(await _declare(ctx, {"filter": {"capability": _NONEXISTENT}}), 4002)


async def v004_a20(ctx: Context) -> Outcome:
    """A.20: a ``session`` context on CAP_INVOKE changes nothing: one success."""
    if (skip := _needs_subject(ctx, params=True)) is not None:
        return skip
    ident = f"{ctx.subject.name}:{ctx.subject.by_id_version()}"
    body = {"id": ident, "params": ctx.subject.params, "session": {"session_id": bytes(range(16))}}
    return expect_success(await _invoke(ctx, body))


async def v004_a23(ctx: Context) -> Outcome:
    """A.23: 4003 and 3004 are encoded on the wire as ``19 0f a3`` and
    ``19 0b bc`` (the ERROR bodies the target sends, byte for byte)."""
    if (skip := _needs_subject(ctx)) is not None:
        return skip
    params = ctx.subject.params if ctx.subject.params is not None else {}
    m = _unsupported_major(ctx)
    mismatch = await _invoke(ctx, {"capability": ctx.subject.name, "params": params,
                                   "negotiate": {"range": f">={m}.0.0 <{m + 1}.0.0"}})
    outcome = expect_error(mismatch, 4003)
    if outcome.status is not Status.PASS:
        return outcome
    if _CODE_4003 not in mismatch.terminals[0].raw:
        return failed("ERROR 4003 is not encoded as 19 0f a3")
    ident = f"{ctx.subject.name}:{ctx.subject.by_id_version()}"
    delegated = await _invoke(ctx, {"id": ident, "params": params, "delegation": {"chain": []}})
    outcome = expect_error(delegated, 3004)
    if outcome.status is not Status.PASS:
        return outcome
    if _CODE_3004 not in delegated.terminals[0].raw:
        return failed("ERROR 3004 is not encoded as 19 0b bc")
    return passed("4003 → 19 0f a3, 3004 → 19 0b bc")


VECTORS: tuple[Vector, ...] = (
    Vector("001:hello", "HELLO 1.0 → one HELLO_ACK", v001_hello),
    Vector("001:hello-reject", "HELLO 99.0 only → HELLO_REJECT", v001_hello_reject),
    Vector("001:1002", "bad signature → 1002", v001_bad_signature),
    Vector("001:1003-expired", "expired ts → 1003", v001_expired),
    Vector("001:1003-future", "future ts → 1003", v001_future),
    Vector("001:1004", "v = 2 after negotiation → 1004", v001_bad_version),
    Vector("001:1005", "unknown typ → 1005", v001_unknown_type),
    Vector("002:A.1", "frame written byte by byte → one reply", v002_a1),
    Vector("002:A.2", "length mismatch frame → 1001", v002_a2),
    Vector("002:A.5", "payload max+1 → ERROR/close", v002_a5),
    Vector("002:A.7", "MESSAGE before HELLO → 1004/1001", v002_a7),
    Vector("004:A.1", "CAP_DECLARE descriptors validate", v004_a1),
    Vector("004:A.2", "negotiate: preferred exact", v004_a2),
    Vector("004:A.3", "negotiate: acceptable fallback", v004_a3),
    Vector("004:A.4", "negotiate: range mismatch → 4003", v004_a4),
    Vector("004:A.5", "valid params → one CAP_RESULT success", v004_a5),
    Vector("004:A.6", "missing required param → 4004", v004_a6),
    Vector("004:A.7", "CAP_QUERY by legacy type", v004_a7),
    Vector("004:A.8", "id vs capability/version → 4001", v004_a8),
    Vector("004:A.14", "pagination with limit + cursor", v004_a14),
    Vector("004:A.15", "bad cursor → 4001", v004_a15),
    Vector("004:A.16", "id + negotiate → 4001", v004_a16),
    Vector("004:A.17", "unknown capability → 4002", v004_a17),
    Vector("004:A.20", "CAP_INVOKE with session → success", v004_a20),
    Vector("004:A.23", "4003/3004 byte encodings", v004_a23),
)


def vector_ids() -> list[str]:
    return [v.id for v in VECTORS]
