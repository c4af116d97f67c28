"""A scripted, deliberately low-level AMP client for black-box interop tests.

The daemon's own :class:`~ampcap.peer.connection.Connection` refuses to build
bad traffic, which is exactly what an interop harness has to send: frames with
a lying length, messages with a broken signature, a stale ``ts``, a wrong
``v``, an unknown ``typ``, application messages before HELLO, oversize frames.
So the probe works one level down: it seals messages with
:func:`~ampcap.wire.envelope.seal`, frames them with
:func:`~ampcap.wire.frames.encode_frame` (or writes arbitrary bytes), and
reads whatever comes back as :class:`Received` records without ever
answering on its own. Judging those records is the vectors' job.

Every read is bounded by a deadline and every buffer by the frame limit, so a
silent or misbehaving target costs a timeout, never a hang or unbounded memory.
"""

from __future__ import annotations

import enum
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from ..errors import AmpError
from ..net.transport.clock import wall_clock_ms
from ..net.transport.url import AmpUrl
from ..peer.config import RELAY_MAX_MSG_SIZE, UNKNOWN_PEER_DID
from ..wire.envelope import Envelope, decode_envelope, encode_envelope, seal
from ..wire.frames import FrameDecoder, FrameType, Framing, FramingError, encode_frame
from ..wire.identity import DidKeyResolver, Identity
from ..wire.receive import ReceivePipeline
from ..wire.registry import MessageType
from ..wire.signing import Profile
from ..wire.transport import HandshakeRequest, HandshakeResponse, TransportError

__all__ = ["ProbeSettings", "Probe", "Received", "ReceivedKind", "Exchange", "ProbeError", "ProbeTimeout",
           "RUST_EXAMPLE_MAX_FRAME"]

RUST_EXAMPLE_MAX_FRAME = RELAY_MAX_MSG_SIZE  # the example relay closes on longer frames
_READ_SIZE = 64 * 1024
# A target that floods us with unrelated frames cannot grow an Exchange
# without bound: past this many records the exchange ends as it stands.
MAX_RECORDS = 256
_HELLO_FAMILY = frozenset({MessageType.HELLO_ACK, MessageType.HELLO_REJECT})


class ProbeError(Exception):
    """The probe could not do what a vector asked (connect, handshake, HELLO).

    Vectors turn it into a ``fail`` with its message; it never escapes the runner.
    """


class ProbeTimeout(ProbeError):
    """The connection did not open within the probe's timeout."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeSettings:
    """How the probe speaks: RFC 002 framing + RFC Sig_Input, or the Rust
    example's raw framing + its Sig_Input variant (ruling R15), never mixed."""

    framing: Framing = Framing.RFC002
    profile: Profile = Profile.RFC
    hello_versions: tuple[str, ...] = ("1.0",)
    # What we offer in the HANDSHAKE: the RFC 002 floor, so the effective
    # maximum is known exactly (1 MiB) and vector A.5 can exceed it by one byte.
    max_msg_size: int = 1 << 20
    timeout_s: float = 5.0  # wait for a first terminal reply
    settle_s: float = 0.3  # keep listening this long for a second terminal reply
    ssl_context: ssl.SSLContext | None = None
    default_ttl_ms: int = 60_000
    # "amps" (TCP framing) or "ws": over a WebSocket (RFC 002 §5) each
    # message is one binary message, so the probe frames as RAW (a length per
    # unit, turned into one WebSocket message each) but HELLO still comes first.
    binding: str = "amps"

    @property
    def raw(self) -> bool:
        """The Rust example's raw framing (no HANDSHAKE, no HELLO)."""
        return self.framing is Framing.RAW and self.binding == "amps"

    @property
    def websocket(self) -> bool:
        return self.binding == "ws"


class ReceivedKind(enum.Enum):
    MESSAGE = "message"  # an AMP_MESSAGE frame whose payload decoded as an envelope
    UNDECODABLE = "undecodable"  # an AMP_MESSAGE payload that is not an envelope
    HANDSHAKE = "handshake"
    TRANSPORT_ERROR = "transport-error"
    GOAWAY = "goaway"
    PING = "ping"
    PONG = "pong"
    CLOSED = "closed"  # EOF, reset, or a stream that could no longer be framed


@dataclass(frozen=True, slots=True, kw_only=True)
class Received:
    """One thing the target did: a frame it sent, or closing the stream."""

    kind: ReceivedKind
    raw: bytes = b""  # the frame payload as received
    envelope: Envelope | None = None
    transport_error: TransportError | None = None
    handshake: HandshakeResponse | None = None
    # Why the target's own message fails our receive checks (bad signature,
    # clock far off…), or None when it passes.
    check_error: AmpError | None = None
    note: str = ""

    @property
    def typ(self) -> int | None:
        return self.envelope.typ if self.envelope is not None else None

    @property
    def error_code(self) -> int | None:
        """The AMP code of an ERROR message or a transport ERROR frame."""
        if self.transport_error is not None:
            return self.transport_error.code
        env = self.envelope
        if env is not None and env.typ == MessageType.ERROR and type(env.body) is dict:
            code = env.body.get("code")
            return code if type(code) is int else None
        return None

    def describe(self) -> str:
        if self.kind is ReceivedKind.MESSAGE and self.envelope is not None:
            env = self.envelope
            name = _type_name(env.typ)
            code = f" code {self.error_code}" if self.error_code is not None else ""
            reply = env.reply_to.hex() if env.reply_to is not None else "none"
            return f"{name}{code} reply_to={reply}"
        if self.kind is ReceivedKind.TRANSPORT_ERROR and self.transport_error is not None:
            return f"transport ERROR {self.transport_error.code} ({self.transport_error.message})"
        return self.kind.value + (f" ({self.note})" if self.note else "")


@dataclass(slots=True)
class Exchange:
    """What came back after one request: terminal replies correlated by
    ``reply_to``, interim replies (PROCESSING/PROGRESS/ACK), everything else."""

    request: Envelope | None
    terminals: list[Received] = field(default_factory=list)
    interim: list[Received] = field(default_factory=list)
    others: list[Received] = field(default_factory=list)
    timed_out: bool = False

    @property
    def closed(self) -> bool:
        return any(r.kind is ReceivedKind.CLOSED for r in self.others)

    def summary(self) -> str:
        parts = [r.describe() for r in self.terminals + self.others]
        if self.timed_out:
            parts.append("no terminal reply before the timeout")
        return "; ".join(parts) or "nothing received"


def _type_name(typ: int) -> str:
    try:
        return MessageType(typ).name
    except ValueError:
        return f"typ 0x{typ:02X}"


class Probe:
    """One connection to the target. Use :meth:`open`, then the send and
    receive methods; :meth:`aclose` at the end (the runner always does)."""

    def __init__(self, stream: trio.abc.Stream, settings: ProbeSettings, *,
                 identity: Identity | None = None, entropy: Callable[[int], bytes] = os.urandom,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.stream = stream
        self.settings = settings
        self._entropy = entropy
        # A fresh identity per connection: a relay that registers connections
        # by sender DID must never confuse one vector's connection with the next.
        self.identity = identity if identity is not None else Identity.generate(entropy)
        self._clock = clock_ms
        limit = settings.max_msg_size if not settings.raw else RUST_EXAMPLE_MAX_FRAME
        # Accept what the target may legally send us (its own offer may be larger).
        self._decoder = FrameDecoder(max(limit, 16 << 20), settings.framing)
        self._pipeline = ReceivePipeline(DidKeyResolver(), profile=settings.profile)
        self._pending: list[Received] = []
        self._closed = False
        self.peer_did: str | None = None
        self.peer_info: dict[str, Any] | None = None  # agent_info the target disclosed
        self.handshake_response: HandshakeResponse | None = None

    # ---------------------------------------------------------- lifecycle

    @classmethod
    async def open(cls, url: AmpUrl, settings: ProbeSettings, **kwargs: Any) -> Probe:
        if settings.binding == "http":  # no connection to open: each frame becomes a request
            from .httpprobe import HttpFrameStream

            http = HttpFrameStream(url, ssl_context=settings.ssl_context, timeout_s=settings.timeout_s,
                                   max_msg_size=settings.max_msg_size, entropy=kwargs.get("entropy", os.urandom))
            probe = cls(http, settings, **kwargs)
            http.identity = probe.identity
            http.peer_did = lambda: probe.peer_did
            return probe
        try:
            with trio.fail_after(settings.timeout_s):
                stream: trio.abc.Stream = await trio.open_tcp_stream(url.host, url.port)
                if url.tls:
                    from ..net.transport.tls import client_context, wrap_client

                    stream = wrap_client(stream, settings.ssl_context or client_context(), url.host)
                if settings.websocket:
                    from ..net.transport.url import format_hostport
                    from ..net.transport.wsmessages import WsMessageStream, client_handshake

                    ws = await client_handshake(stream, format_hostport(url.host, url.port), token=None,
                                                max_size=settings.max_msg_size, timeout_s=settings.timeout_s)
                    stream = WsMessageStream(stream, ws, max_size=16 << 20)
        except AmpError as exc:  # the WebSocket upgrade was refused
            raise ProbeError(f"cannot open a WebSocket to {url}: {exc.message}") from None
        except trio.TooSlowError:
            raise ProbeTimeout(f"cannot connect to {url}: no connection within {settings.timeout_s:g} s") from None
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name the resolver's IDNA step refuses
            raise ProbeError(f"cannot connect to {url}: {exc}") from None
        return cls(stream, settings, **kwargs)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)

    def now_ms(self) -> int:
        return self._clock()

    # --------------------------------------------------------------- send

    async def send_bytes(self, data: bytes, *, chunk: int | None = None) -> bool:
        """Write raw bytes (optionally ``chunk`` bytes per write, to test
        reassembly). False when the target already closed the stream."""
        try:
            if chunk is None:
                await self.stream.send_all(data)
            else:
                for start in range(0, len(data), chunk):
                    await self.stream.send_all(data[start:start + chunk])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return False
        return True

    def frame(self, payload: bytes, ftype: FrameType = FrameType.AMP_MESSAGE) -> bytes:
        return encode_frame(ftype, payload, self.settings.framing)

    def seal(self, typ: int, body: Any, *, to: str | None = None, v: int = 1, ts_ms: int | None = None,
             ttl_ms: int | None = None, reply_to: bytes | None = None,
             corrupt_signature: bool = False) -> tuple[Envelope, bytes]:
        """Sign a message from the probe's identity (``ts_ms`` may be stale or
        in the future; ``corrupt_signature`` flips one bit of ``sig``)."""
        env, wire = seal(self.identity, typ=typ, to=to or self.peer_did or UNKNOWN_PEER_DID, body=body,
                         now_ms=self.now_ms() if ts_ms is None else ts_ms, entropy=self._entropy,
                         ttl=self.settings.default_ttl_ms if ttl_ms is None else ttl_ms,
                         reply_to=reply_to, v=v, profile=self.settings.profile)
        if corrupt_signature:
            sig = bytearray(env.sig)
            sig[len(sig) // 2] ^= 0x01
            env = msgspec.structs.replace(env, sig=bytes(sig))
            wire = encode_envelope(env)
        return env, wire

    async def send_message(self, typ: int, body: Any, **kwargs: Any) -> Envelope:
        env, wire = self.seal(typ, body, **kwargs)
        await self.send_bytes(self.frame(wire))
        return env

    # ------------------------------------------------------------ receive

    async def receive(self, deadline: float) -> Received | None:
        """The next thing the target did, or None once trio time ``deadline`` passes."""
        while not self._pending:
            if self._closed:
                return None
            with trio.move_on_at(deadline):
                try:
                    data = await self.stream.receive_some(_READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self._close(f"connection reset ({exc.__class__.__name__})")
                    continue
                if not data:
                    self._close("target closed the connection")
                    continue
                self._feed(data)
                continue
            return None
        return self._pending.pop(0)

    def _close(self, note: str) -> None:
        self._closed = True
        self._pending.append(Received(kind=ReceivedKind.CLOSED, note=note))

    def _feed(self, data: bytes | bytearray) -> None:
        try:
            frames = self._decoder.feed(data)
        except FramingError as exc:
            frames = list(exc.frames)
            for frame in frames:
                self._pending.append(self._classify(frame.type, frame.payload))
            self._close(f"target sent bytes we cannot frame: {exc.message}")
            return
        for frame in frames:
            self._pending.append(self._classify(frame.type, frame.payload))

    def _classify(self, ftype: FrameType, payload: bytes) -> Received:
        if ftype is FrameType.AMP_MESSAGE:
            try:
                env = decode_envelope(payload, self._pipeline.limits)
            except AmpError as exc:
                return Received(kind=ReceivedKind.UNDECODABLE, raw=payload, note=exc.message)
            check_error = None
            try:
                self._pipeline.check(payload, self.now_ms())
            except AmpError as exc:
                check_error = exc
            return Received(kind=ReceivedKind.MESSAGE, raw=payload, envelope=env, check_error=check_error)
        if ftype is FrameType.ERROR:
            try:
                return Received(kind=ReceivedKind.TRANSPORT_ERROR, raw=payload,
                                transport_error=TransportError.from_payload(payload))
            except AmpError as exc:
                return Received(kind=ReceivedKind.UNDECODABLE, raw=payload, note=f"bad ERROR frame: {exc.message}")
        if ftype is FrameType.HANDSHAKE:
            try:
                return Received(kind=ReceivedKind.HANDSHAKE, raw=payload,
                                handshake=HandshakeResponse.from_payload(payload))
            except AmpError as exc:
                return Received(kind=ReceivedKind.UNDECODABLE, raw=payload, note=f"bad HANDSHAKE: {exc.message}")
        kinds = {FrameType.GOAWAY: ReceivedKind.GOAWAY, FrameType.PING: ReceivedKind.PING,
                 FrameType.PONG: ReceivedKind.PONG}
        return Received(kind=kinds[ftype], raw=payload)

    async def collect(self, request: Envelope | None, terminal_types: frozenset[int], *,
                      interim_types: frozenset[int] = frozenset(), accept_transport_error: bool = True,
                      timeout_s: float | None = None, settle_s: float | None = None) -> Exchange:
        """Gather replies to ``request``: wait for the first terminal one, then
        keep listening ``settle_s`` so that a second terminal reply is seen.

        A terminal reply is a message of ``terminal_types`` (or an AMP ERROR)
        whose ``reply_to`` is the request id, or, when ``accept_transport_error``,
        a transport ERROR frame (these name the message in ``msg_id`` at best).
        """
        ex = Exchange(request)
        wanted_id = request.id if request is not None else None
        deadline = trio.current_time() + (self.settings.timeout_s if timeout_s is None else timeout_s)
        settle_until: float | None = None
        settle = self.settings.settle_s if settle_s is None else settle_s
        while True:
            item = await self.receive(settle_until if settle_until is not None else deadline)
            if item is None:
                ex.timed_out = settle_until is None
                return ex
            env = item.envelope
            terminal = False
            if item.kind is ReceivedKind.MESSAGE and env is not None:
                correlated = wanted_id is not None and env.reply_to == wanted_id
                if correlated and (env.typ in terminal_types or env.typ == MessageType.ERROR):
                    terminal = True
                elif correlated and env.typ in interim_types and len(ex.interim) < MAX_RECORDS:
                    ex.interim.append(item)
                    continue
            elif item.kind is ReceivedKind.TRANSPORT_ERROR and accept_transport_error:
                msg_id = item.transport_error.msg_id if item.transport_error else None
                terminal = msg_id is None or msg_id == wanted_id
            if terminal:
                ex.terminals.append(item)
                if settle_until is None:
                    settle_until = trio.current_time() + settle
                continue
            ex.others.append(item)
            if len(ex.others) + len(ex.interim) + len(ex.terminals) >= MAX_RECORDS:
                ex.others.append(Received(kind=ReceivedKind.UNDECODABLE,
                                          note=f"stopped listening after {MAX_RECORDS} frames"))
                ex.timed_out = not ex.terminals
                return ex
            if item.kind is ReceivedKind.CLOSED:
                ex.timed_out = not ex.terminals
                return ex

    # ----------------------------------------------------- session set-up

    async def handshake(self) -> HandshakeResponse:
        """RFC 002 §4.4: our HANDSHAKE, the target's answer. A WebSocket has
        none (its upgrade carried the size): the answer is made up from it."""
        if self.settings.websocket:
            self.handshake_response = HandshakeResponse(accepted=True, max_msg_size=self.settings.max_msg_size)
            return self.handshake_response
        request = HandshakeRequest(max_msg_size=self.settings.max_msg_size, did=self.identity.did)
        await self.send_bytes(self.frame(request.to_payload(), FrameType.HANDSHAKE))
        deadline = trio.current_time() + self.settings.timeout_s
        while True:
            item = await self.receive(deadline)
            if item is None:
                raise ProbeError("no HANDSHAKE reply before the timeout")
            if item.kind is ReceivedKind.HANDSHAKE and item.handshake is not None:
                if not item.handshake.accepted:
                    raise ProbeError(f"HANDSHAKE refused: {item.handshake.error or 'no reason given'}")
                self.handshake_response = item.handshake
                return item.handshake
            raise ProbeError(f"expected a HANDSHAKE reply, got {item.describe()}")

    async def hello(self, versions: tuple[str, ...] | None = None, *,
                    settle_s: float | None = None) -> tuple[Envelope, Exchange]:
        """Send HELLO (``v = 1``, RFC 001 §13.1) and collect HELLO_ACK / HELLO_REJECT."""
        body = {"versions": list(versions or self.settings.hello_versions),
                "agent_info": {"name": "ampcap-interop", "implementation": _implementation()}}
        hello = await self.send_message(MessageType.HELLO, body, to=self.peer_did or UNKNOWN_PEER_DID)
        ex = await self.collect(hello, _HELLO_FAMILY, settle_s=settle_s)
        for item in ex.terminals:
            env = item.envelope
            if env is not None and env.typ == MessageType.HELLO_ACK:
                self.peer_did = env.sender
                info = env.body.get("agent_info") if type(env.body) is dict else None
                if type(info) is dict:
                    self.peer_info = info
        return hello, ex

    async def open_session(self) -> None:
        """Get to the point where application messages may flow: HANDSHAKE
        and HELLO under RFC 002 framing; nothing under raw framing (the Rust
        example has neither, R3), where the first message registers us."""
        if self.settings.raw:
            return
        await self.handshake()
        # No settle window here: duplicate HELLO replies are vector 001:hello's business.
        _, ex = await self.hello(settle_s=0.0)
        acks = [t for t in ex.terminals if t.typ == MessageType.HELLO_ACK]
        if len(acks) != 1:
            raise ProbeError(f"HELLO did not complete: {ex.summary()}")


def _implementation() -> str:
    from .. import __version__

    return f"ampcap/{__version__}"
