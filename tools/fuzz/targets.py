"""Fuzz targets: each takes one input (bytes) and may only fail by raising
what it is meant to raise. Drive them with libFuzzer through atheris
(``python tools/fuzz/run.py TARGET``) or, in CI, over their seeds and some
random bytes (``tests/test_fuzz_targets.py``).

Every target rebuilds its state per input, so a finding replays alone.
What is allowed to escape: nothing, except ``AmpError`` where a caller is
documented to get one (the CLI turns it into one line). Each target also
checks a rule that must hold whatever the input: one terminal reply per
CAP_INVOKE, at most one outcome per call.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cbor2

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.params import ParamsValidator
from ampcap.dump.pcapwrite import PcapWriter
from ampcap.display import printable
from ampcap.errors import AmpError
from ampcap.bindings.runner import BindingRunner, RunnerContext
from ampcap.peer.config import ConnectionConfig, rust_example_config
from ampcap.peer.connection import Connection, Role
from ampcap.peer.events import MessageReceived
from ampcap.peer.executor import Execute, Executor, ExecutorConfig
from ampcap.peer.invoker import Invoker, InvokerConfig, RetryPolicy
from ampcap.peer.limits import InFlightLimits
from ampcap.peer.outbound import Outbound, Send
from ampcap.peer.policy import ALLOW_ALL
from ampcap.peer.sealing import Sealer
from ampcap.schema import load_schemas
from ampcap.wire.cbor import loads
from ampcap.wire.envelope import seal
from ampcap.wire.frames import FrameType, Framing, encode_frame
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import ReceivePipeline
from ampcap.wire.signing import Profile
from ampcap.wire.transport import HandshakeRequest

NOW = int(time.time() * 1000)
CLIENT_ID, SERVER_ID = Identity.from_seed(bytes(range(32))), Identity.from_seed(bytes(range(1, 33)))
_SCHEMAS = load_schemas()
_MANIFEST = demo_manifest()
_CATALOG = Catalog(list(_MANIFEST.capabilities), cursor_key=bytes(32))
_PARAMS = ParamsValidator(_MANIFEST.schema_store())
_RUNNER = BindingRunner()

ECHO_INVOKE = {"params": {"message": "hi"}, "version": "1.0.0", "capability": "org.ampcap.demo.echo"}
# Message types a fuzzed message may claim (requests, replies, provisional,
# transport, and a few nobody registered).
TYPES = (0x20, 0x21, 0x22, 0x23, 0x01, 0x02, 0x03, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x30, 0x31, 0xF0, 0x04)
REPLY_TYPES = (0x23, 0x21, 0x0F, 0x02, 0x30, 0x31, 0x32, 0x33, 0x10)


def _pipeline() -> ReceivePipeline:
    return ReceivePipeline(DidKeyResolver(), schemas=_SCHEMAS)


def connected_pair(record: Callable[[str, bytes], None] | None = None) -> tuple[Connection, Connection]:
    """A client and a server Connection that completed HANDSHAKE and HELLO;
    ``record(direction, data)`` sees every byte exchanged ("c2s"/"s2c")."""
    client = Connection(role=Role.CLIENT, identity=CLIENT_ID, pipeline=_pipeline(), entropy=os.urandom)
    server = Connection(role=Role.SERVER, identity=SERVER_ID, pipeline=_pipeline(), entropy=os.urandom)
    client.start(NOW)
    server.start(NOW)
    for _ in range(4):
        for direction, sender, receiver in (("c2s", client, server), ("s2c", server, client)):
            if data := sender.data_to_send():
                if record is not None:
                    record(direction, data)
                receiver.receive_data(data, NOW)
    assert client.peer_did == SERVER_ID.did and server.peer_did == CLIENT_ID.did
    while client.next_event() or server.next_event():
        pass
    return client, server


def _body(raw: bytes) -> Any:
    """Any CBOR item the bytes hold; otherwise an invoke carrying them."""
    try:
        return cbor2.loads(raw)
    except Exception:
        return {**ECHO_INVOKE, "params": {"message": raw.hex()}}


# ------------------------------------------------------------------ targets


def frames(data: bytes) -> None:
    """Raw bytes at a server, before the handshake or after it, in small
    reads; at a relay client (raw framing); or at the decoder and the
    receive pipeline directly."""
    mode, rest = data[:1], data[1:]
    if mode == b"L":
        try:
            loads(rest)
        except AmpError:
            pass
        return
    if mode == b"P":
        pipe = _pipeline()
        try:
            pipe.check(rest, NOW)
        except AmpError:
            pass
        pipe.inspect(rest, NOW)
        return
    if mode == b"H":
        _, server = connected_pair()
    elif mode == b"R":  # what a relay client (--compat rust-example) reads: bare lengths, no handshake
        server = Connection(role=Role.CLIENT, identity=SERVER_ID, entropy=os.urandom, peer_did=CLIENT_ID.did,
                            config=rust_example_config(ConnectionConfig(keepalive_interval_ms=None)),
                            pipeline=ReceivePipeline(DidKeyResolver(), schemas=_SCHEMAS,
                                                     profile=Profile.RUST_EXAMPLE))
        server.start(NOW)
    else:
        server = Connection(role=Role.SERVER, identity=SERVER_ID, pipeline=_pipeline(), entropy=os.urandom)
        server.start(NOW)
    for i in range(0, len(rest), 7):
        server.receive_data(rest[i:i + 7], NOW)
    server.receive_eof()
    while server.next_event():
        pass
    server.data_to_send()


def render(data: bytes) -> None:
    """Any CBOR a peer can send, as ``ampcap invoke``/``query`` and the dump
    show it: strict JSON (any keys, tags, NaN) and one-line diagnostic
    notation, with no control or bidi character left raw."""
    from ampcap.cli.calling import to_json
    from ampcap.dump.diag import diag

    try:
        value = loads(data)
    except AmpError:
        return
    for shown in (to_json(value), to_json(value, indent=2), diag(value), printable(str(value))):
        assert not any(c in shown for c in _UNSAFE), shown
    json.loads(to_json(value), parse_constant=_not_strict)


_UNSAFE = frozenset(map(chr, [*range(0x0A), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x202E]))


def _not_strict(constant: str) -> None:
    raise AssertionError(f"not strict JSON: {constant}")


def executor(data: bytes) -> None:
    """A signed message of any type with any body reaches the executor; a
    CAP_INVOKE gets exactly one terminal reply, and every reply decodes."""
    if not data:
        return
    typ, body = TYPES[data[0] % len(TYPES)], _body(data[1:])
    client, server = connected_pair()
    ex = Executor(registry=_CATALOG, resolver=_CATALOG, params=_PARAMS, policy=ALLOW_ALL,
                  limits=InFlightLimits(per_connection=8, total=8), config=ExecutorConfig(),
                  seal=Sealer(SERVER_ID, os.urandom, DidKeyResolver()))
    try:
        client.send(Outbound(typ=typ, body=body), NOW)
    except AmpError:
        return  # not encodable: never reaches the wire
    server.receive_data(client.data_to_send(), NOW)
    while (event := server.next_event()) is not None:
        if type(event) is not MessageReceived:
            continue
        replies = 0
        for action in ex.handle(event.inbound, "c", NOW):
            if type(action) is Send:
                server.send(action.out, NOW)
                replies += 1
            elif type(action) is Execute:
                replies += _run(ex, server, action)
        if typ == 0x22:
            assert replies == 1, f"{replies} terminal replies to {body!r}"
    if wire := server.data_to_send():
        client.receive_data(wire, NOW)
        while client.next_event():
            pass


def _run(ex: Executor, server: Connection, action: Execute) -> int:
    job = action.job
    ctx = RunnerContext(capability_id=job.capability_id, version=str(job.descriptor.version), clock_ms=lambda: NOW)
    # Inline bindings run here; the others (a subprocess, an async function)
    # need the daemon's tasks, so their outcome is taken as a plain result.
    result: Any = {"ran": job.capability_id}
    error: AmpError | None = None
    if _RUNNER.is_inline(job.binding):
        try:
            result = _RUNNER.run_inline(job.binding, job.params, ctx)  # type: ignore[arg-type]
        except AmpError as exc:
            result, error = None, exc
    sent = 0
    for out in ex.complete(job.key, result=result, error=error, now_ms=NOW):
        if type(out) is Send:
            server.send(out.out, NOW)
            sent += 1
    return sent


def invoker(data: bytes) -> None:
    """A provider answers a pending CAP_INVOKE or CAP_QUERY with any reply
    type and any body, properly signed: the caller gets at most one outcome."""
    if len(data) < 2:
        return
    kind, typ, body = data[0] % 3, REPLY_TYPES[data[1] % len(REPLY_TYPES)], _body(data[2:])
    client, server = connected_pair()
    inv = Invoker(InvokerConfig(), lambda: 0.5, os.urandom)
    if kind == 0:
        handle, out = inv.start_invoke("s", ("org.x.y", "1.0.0"), {"a": 1}, now_ms=NOW)
    elif kind == 1:
        handle, out = inv.start_invoke("s", ("org.x.y", ">=1.0.0"), {"a": 1}, retry=RetryPolicy(), now_ms=NOW)
    else:
        handle, out = inv.start_query("s", {"capability": "org.x.y"}, now_ms=NOW)
    client.send(out, NOW)
    try:
        server.send(Outbound(typ=typ, body=body, reply_to=handle), NOW)
    except AmpError:
        return
    client.receive_data(server.data_to_send(), NOW)
    outcomes = 0
    while (event := client.next_event()) is not None:
        if type(event) is MessageReceived:
            outcomes += sum(_is_outcome(e) for e in inv.on_reply(event.inbound, "s", NOW))
    outcomes += sum(_is_outcome(e) for e in inv.handle_timer(NOW + 10**9))
    assert outcomes <= 1, f"{outcomes} outcomes for one call"


def _is_outcome(event: Any) -> bool:
    return type(event).__name__ in ("InvokeSucceeded", "InvokeFailed", "QueryAnswered", "QueryFailed")


def dump(data: bytes) -> None:
    """``ampcap dump`` on a file (pcap, framed stream, or hex): only AmpError
    or CommandError (input that is no hex), which the CLI prints as one line."""
    from ampcap.cli import dump as dump_cli
    from ampcap.cli.errors import CommandError
    from ampcap.cli.main import build_parser

    if not data:
        return
    argv = (["dump", "-", "--json"], ["dump", "-"], ["dump", "-", "--hex"])[data[0] % 3]
    args = build_parser().parse_args(argv)
    try:
        dump_cli._run(args, io.BytesIO(data[1:]), io.StringIO())
    except (AmpError, CommandError):
        pass


# -------------------------------------------------------------------- seeds


def _signed_invoke() -> bytes:
    return seal(CLIENT_ID, typ=0x22, to=SERVER_ID.did, body=ECHO_INVOKE, now_ms=NOW, entropy=os.urandom)[1]


def _capture() -> bytes:
    """A pcap of a handshake, HELLO, an invoke and its result."""
    buf = io.BytesIO()
    writer = PcapWriter(buf)
    writer.open(1, "127.0.0.1:50000", "127.0.0.1:7700", 1.0)
    clock = iter(range(1000))

    def record(direction: str, data: bytes) -> None:
        writer.data(1, direction, data, 1.0 + next(clock) / 1000)

    client, server = connected_pair(record)
    env = client.send(Outbound(typ=0x22, body=ECHO_INVOKE), NOW)
    record("c2s", client.data_to_send())
    server.send(Outbound(typ=0x23, body={"result": {"message": "hi"}, "status": "success"}, reply_to=env.id), NOW)
    record("s2c", server.data_to_send())
    end = 1.0 + next(clock) / 1000
    writer.close(1, "c2s", end)
    writer.close(1, "s2c", end)
    return buf.getvalue()


def _seeds_frames() -> Iterator[bytes]:
    message = _signed_invoke()
    framed = encode_frame(FrameType.AMP_MESSAGE, message)
    yield b"L" + message
    yield b"P" + message
    yield b"H" + framed
    handshake = HandshakeRequest(max_msg_size=1 << 20, did=CLIENT_ID.did).to_payload()
    yield b"S" + encode_frame(FrameType.HANDSHAKE, handshake) + framed
    rust = seal(CLIENT_ID, typ=0x22, to=SERVER_ID.did, body=ECHO_INVOKE, now_ms=NOW, entropy=os.urandom,
                profile=Profile.RUST_EXAMPLE)[1]
    yield b"R" + encode_frame(FrameType.AMP_MESSAGE, rust, Framing.RAW)


def _seeds_render() -> Iterator[bytes]:
    yield cbor2.dumps({"result": {"a": [1, 2.5, b"\x00", None]}, "status": "success"})
    yield cbor2.dumps({b"k": 1, 1: "x", "1": "y", (1, 2): float("nan")})
    yield cbor2.dumps({"t": cbor2.CBORTag(2, b"\x01" * 20), "u": cbor2.CBORTag(99, {"x": "\x1b[2J\u202e"})})


def _seeds_executor() -> Iterator[bytes]:
    yield bytes([TYPES.index(0x22)]) + cbor2.dumps(ECHO_INVOKE)
    yield bytes([TYPES.index(0x22)]) + cbor2.dumps({"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 1}})
    yield bytes([TYPES.index(0x20)]) + cbor2.dumps({"filter": {"capability": "org.ampcap.demo.echo"}})
    yield bytes([TYPES.index(0x22)]) + bytes.fromhex("a3" "00f6" "66706172616d73a0" "d5a2" "0000" "0710" "00")


def _seeds_invoker() -> Iterator[bytes]:
    bodies = [
        (0, {"result": {"a": 1}, "status": "success"}),
        (0, {"error": {"code": 5001, "name": "INTERNAL_ERROR", "message": "x"}, "status": "error"}),
        (2, {"code": 4002, "message": "x", "retry": False}),
        (1, {"progress_pct": 50, "status_text": "x"}),
    ]
    for reply, body in bodies:
        for kind in range(3):
            yield bytes([kind, reply]) + cbor2.dumps(body)


def _seeds_dump() -> Iterator[bytes]:
    capture = _capture()
    yield b"\x00" + capture
    yield b"\x01" + capture
    yield b"\x02" + encode_frame(FrameType.AMP_MESSAGE, _signed_invoke()).hex().encode()


# ------------------------------------------------------------- delegation

_DELEG_IDS = [Identity.from_seed(bytes([n]) * 32) for n in (1, 2, 3, 4)]
_DELEG_NOW = 1_770_000_000_000


def _deleg_chain() -> list[bytes]:
    from ampcap.deleg.credential import issue

    a, b, c, d = _DELEG_IDS
    return [
        issue(a, delegation_id="f-1", delegate=b.did, issued_at=_DELEG_NOW - 1000, expires_at=_DELEG_NOW + 60_000,
              capabilities=["org.ampcap.demo.echo"], actions=["invoke"], allow_subdelegation=True).raw,
        issue(b, delegation_id="f-2", delegate=c.did, issued_at=_DELEG_NOW - 1000, expires_at=_DELEG_NOW + 60_000,
              capabilities=["org.ampcap.demo.echo:1.0.0"], allow_subdelegation=True, max_chain_depth=1).raw,
        issue(c, delegation_id="f-3", delegate=d.did, issued_at=_DELEG_NOW - 1000, expires_at=_DELEG_NOW + 60_000,
              capabilities=["org.ampcap.demo.echo:1.0.0"]).raw,
    ]


def delegation(data: bytes) -> None:
    """RFC 005 input from a peer: the first byte picks what the rest is, a
    CAP_INVOKE's ``body.delegation`` (0), one link of a valid chain (1-3),
    or a DELEG_GRANT/REVOKE/QUERY body (4-6). The verifier must decide
    (never raise) within bounds; the DELEG_* roles may raise only AmpError."""
    from ampcap.deleg.chain import ChainVerifier, VerifierConfig
    from ampcap.deleg.credential import credential_envelope
    from ampcap.deleg.revocation import RevocationChecker
    from ampcap.deleg.scope import Target as DelegTarget
    from ampcap.deleg.service import DelegationService, MemoryState
    from ampcap.wire.registry import MessageType

    if not data:
        return
    kind, rest = data[0] % 7, data[1:]
    state = MemoryState()
    if kind >= 4:
        service = DelegationService(state, DidKeyResolver(), own_did=_DELEG_IDS[0].did)
        typ = (MessageType.DELEG_GRANT, MessageType.DELEG_REVOKE, MessageType.DELEG_QUERY)[kind - 4]
        try:
            service.handle(int(typ), _body(rest), _DELEG_IDS[0].did, _DELEG_NOW)
        except AmpError:
            pass
        return
    if kind == 0:
        evidence = _body(rest)
    else:
        links = [credential_envelope(raw) for raw in _deleg_chain()]
        links[kind - 1] = credential_envelope(rest)
        evidence = {"chain": links}
    verifier = ChainVerifier(DidKeyResolver(), RevocationChecker(store=state), VerifierConfig())
    started = time.perf_counter()
    for _ in range(2):  # the second time through the chain cache
        decision = verifier.evaluate(typ=int(MessageType.CAP_INVOKE), evidence=evidence,
                                     caller=_DELEG_IDS[3].did, now_ms=_DELEG_NOW,
                                     target=DelegTarget(capability="org.ampcap.demo.echo",
                                                        capability_id="org.ampcap.demo.echo:1.0.0"))
        if decision.error is not None and decision.error.code not in (1004, 3001, 3004):
            raise AssertionError(f"unexpected delegation code {decision.error}")
        decision.audit.to_json()
    if time.perf_counter() - started > 1.0:
        raise AssertionError("a chain took more than a second to decide")


def _seeds_delegation() -> Iterator[bytes]:
    from ampcap.deleg.credential import credential_envelope, revoke

    chain = _deleg_chain()
    yield b"\x00" + cbor2.dumps({"chain": [credential_envelope(raw) for raw in chain]})
    yield b"\x00" + cbor2.dumps({"chain": [credential_envelope(raw) for raw in chain],
                                  "target": {"action": "invoke"}})
    for i, raw in enumerate(chain):
        yield bytes([i + 1]) + raw
    yield b"\x04" + cbor2.dumps({"credential": credential_envelope(chain[0])})
    rev = revoke(_DELEG_IDS[0], delegation_id="f-1", revoked_at=_DELEG_NOW)
    yield b"\x05" + cbor2.dumps({"delegation_id": "f-1", "revocation": rev.raw})
    yield b"\x06" + cbor2.dumps({"delegation_id": "f-1", "delegator": _DELEG_IDS[0].did})


@dataclass(frozen=True)
class Target:
    run: Callable[[bytes], None]
    seeds: Callable[[], Iterator[bytes]]
    max_len: int = 4096


TARGETS = {
    "frames": Target(frames, _seeds_frames),
    "executor": Target(executor, _seeds_executor, max_len=1024),
    "invoker": Target(invoker, _seeds_invoker, max_len=1024),
    "dump": Target(dump, _seeds_dump),
    "render": Target(render, _seeds_render),
    "delegation": Target(delegation, _seeds_delegation),
}

# The HTTP binding, the WebSocket message layer, bearer tokens and session
# control bodies (tools/fuzz/http_targets.py).
from http_targets import http_targets  # noqa: E402

TARGETS.update(http_targets(Target))

# RFC 007 payment bodies at the payee's engine (tools/fuzz/pay_targets.py).
from pay_targets import pay_targets  # noqa: E402

TARGETS.update(pay_targets(Target))

# The RFC 003 relay's wire inputs (tools/fuzz/relay_targets.py).
from relay_targets import relay_targets  # noqa: E402

TARGETS.update(relay_targets(Target))
