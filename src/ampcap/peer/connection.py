"""One AMP connection, sans-I/O (RFC 002 §3–§4, RFC 001 §13, ruling R4).

Bytes go in through :meth:`Connection.receive_data` / :meth:`receive_eof`,
events come out of :meth:`next_event`, and everything the connection wants
to write accumulates in one buffer that :meth:`data_to_send` hands out in a
single piece (so the edge writes once per wakeup, never once per frame).
Time is always an argument; the edge asks :meth:`get_timer` for the next
deadline and calls :meth:`handle_timer` when it passes.

Sequence (RFC 002 framing): the client queues a HANDSHAKE request on
:meth:`start`; the server answers with a HANDSHAKE response; the effective
maximum is the smaller offer but never under 1 MiB; the client then sends
HELLO and the server answers HELLO_ACK or HELLO_REJECT. Only then is the
connection OPEN. Under raw framing (R3) there are no control frames: the
HANDSHAKE is skipped and HELLO runs only when ``config.raw_hello`` is set;
otherwise the version is preconfigured and a peer's own first HELLO is still
answered (``_on_late_hello``).

How failures are answered:

* A message that cannot even be framed, an oversize frame, a bad control
  payload or a frame the state does not allow: transport ERROR frame, close.
* Before negotiation, an application message (RFC 002 A.7): transport ERROR
  frame 1004 naming the message (an AMP ERROR would itself be a
  non-handshake message, which §3.3 forbids), then close by policy.
* After negotiation, a message that fails a receive check: a signed AMP
  ERROR to its sender with ``reply_to`` = its id, when its envelope could be
  read; otherwise a transport ERROR frame. Never an ERROR for an ERROR.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..display import quoted
from ..errors import AmpError, LocalProtocolError, MessageTooLarge, RemoteProtocolError, SignedButRefused
from ..wire.envelope import Envelope, decode_envelope, seal
from ..wire.frames import FrameDecoder, FrameType, Framing, FramingError, encode_frame
from ..wire.identity import Identity
from ..wire.receive import Inbound, ReceivePipeline, addressed_to
from ..wire.registry import MessageType
from ..wire.transport import (
    MAX_CONTROL_PAYLOAD,
    TRANSPORT_VERSION,
    GoAway,
    HandshakeRequest,
    HandshakeResponse,
    TransportError,
    effective_max,
)
from .sealing import seal_outbound
from .config import UNKNOWN_PEER_DID, ConnectionConfig, major_of
from .events import (
    ConnectionTerminated,
    Event,
    GoAwayReceived,
    InputEnded,
    HandshakeCompleted,
    MessageReceived,
    MessageRejected,
    Negotiated,
    PingAcknowledged,
)
from .state import (
    ConnInput,
    ConnState,
    HelloInput,
    HelloState,
    StateViolation,
    advance,
    advance_hello,
)

if TYPE_CHECKING:  # for type hints only: nothing of outbound runs here
    from .outbound import Outbound

__all__ = ["Connection", "Role"]

_HELLO_TYPES = frozenset({MessageType.HELLO, MessageType.HELLO_ACK, MessageType.HELLO_REJECT})
# Frames whose payload is a small CBOR map (decoded with MAX_CONTROL_PAYLOAD as
# a limit anyway): refused from the header when they declare more.
_CONTROL_FRAMES = frozenset({FrameType.HANDSHAKE, FrameType.GOAWAY, FrameType.ERROR})
# New work that a draining connection refuses with 5002 (replies still pass).
_NEW_WORK = frozenset({MessageType.CAP_INVOKE, MessageType.CAP_QUERY})
_ERROR_TYPE = int(MessageType.ERROR)
_PING_PAYLOAD_SIZE = 8


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class Connection:
    """The protocol state of one AMP connection (either role)."""

    def __init__(self, *, role: Role, identity: Identity, pipeline: ReceivePipeline,
                 config: ConnectionConfig | None = None, entropy: Callable[[int], bytes],
                 peer_did: str | None = None) -> None:
        """``peer_did`` is the DID the client expects to reach (optional); a
        HELLO / HELLO_ACK signed by anyone else ends the connection (3001)."""
        self.role = role
        self.identity = identity
        self.pipeline = pipeline
        self.config = config if config is not None else ConnectionConfig()
        self._entropy = entropy
        self.state = ConnState.IDLE
        self.hello_state = HelloState.UNNEGOTIATED
        self.peer_did: str | None = None
        self.peer_did_hint: str | None = None  # handshake ``did`` (unauthenticated)
        self._expected_peer = peer_did
        self.negotiated_version: str | None = None
        self._major = 1
        self.max_msg_size = self.config.max_msg_size
        self.draining_by_us = False
        self.input_ended = False  # the peer half-closed: it sends nothing more
        self._raw = self.config.framing is Framing.RAW
        self._decoder = FrameDecoder(self.config.max_msg_size, self.config.framing)
        self._transport_ready = False  # HANDSHAKE frames exchanged (or skipped)
        self._out = bytearray()
        self._events: deque[Event] = deque()
        self._handshake_deadline: int | None = None
        self._last_rx = 0
        self._ping_payload: bytes | None = None
        self._ping_deadline: int | None = None
        self._drain_deadline: int | None = None
        self._frame_since: int | None = None  # when the frame now half-received began
        self._last_accepted_id: bytes | None = None
        self._hello_id: bytes | None = None
        self._heard = False  # any byte from the peer yet
        # Raw framing without HELLO: the version came from config, and the
        # peer may still send one HELLO of its own (see _on_late_hello).
        self._late_hello_allowed = False

    # ================================================================ API

    def start(self, now_ms: int) -> None:
        """The transport is up: the client queues its HANDSHAKE request (or,
        under raw framing, its HELLO); the server starts its handshake timer."""
        self._go(ConnInput.START)
        self._last_rx = now_ms
        self._handshake_deadline = now_ms + self.config.handshake_timeout_ms
        if self._raw:
            self._go(ConnInput.SKIP_HANDSHAKE)
            self._transport_ready = True
            self._events.append(HandshakeCompleted(max_msg_size=self.max_msg_size, peer_did_hint=None))
            if not self.config.raw_hello:
                self._late_hello_allowed = True
                self._negotiated(self.config.versions[0], self._expected_peer,
                                 advance_hello(self.hello_state, HelloInput.PRECONFIGURED))
            elif self.role is Role.CLIENT:
                self._send_hello(now_ms)
        elif self.role is Role.CLIENT:
            request = HandshakeRequest(max_msg_size=self.config.max_msg_size, did=self.identity.did)
            self._queue_frame(FrameType.HANDSHAKE, request.to_payload())
            self._go(ConnInput.SEND_HANDSHAKE)

    def receive_data(self, data: bytes | bytearray, now_ms: int) -> None:
        """Feed bytes read from the peer; events become available."""
        if data:
            self._heard = True
        if self.state is ConnState.CLOSED or not data:
            return
        self._last_rx = now_ms
        try:
            frames = self._decoder.feed(data)
            failure: FramingError | None = None
        except FramingError as exc:
            frames, failure = list(exc.frames), exc
        if self._decoder.buffered:
            if frames or self._frame_since is None:
                self._frame_since = now_ms  # a new frame began in this read
        else:
            self._frame_since = None
        for frame in frames:
            if self.state is ConnState.CLOSED:
                return
            try:
                self._on_frame(frame.type, frame.payload, now_ms)
            except AmpError as exc:  # any violation found while handling a frame is fatal
                self._fail(exc)
        if failure is not None and self.state is not ConnState.CLOSED:
            self._fail(failure)
        elif self._frame_since is not None and self.state is not ConnState.CLOSED:
            self._check_incoming_frame()

    @property
    def incoming_frame_size(self) -> int:
        """The declared payload size of the frame being received, once its
        header has arrived; 0 when none is (or the connection is closed). The
        edge budgets large frames by it before reading their payload."""
        if self.state is ConnState.CLOSED or not self._decoder.buffered:
            return 0
        header = self._decoder.incomplete_frame()
        return 0 if header is None else header[1]

    def _check_incoming_frame(self) -> None:
        """Refuse, from its header alone, a frame larger than this point of
        the connection allows (the decoder already bounds every frame by the
        effective maximum): a control frame over MAX_CONTROL_PAYLOAD, and
        anything over ``max_negotiation_payload`` before HELLO completes."""
        header = self._decoder.incomplete_frame()
        if header is None:
            return
        ftype, size = header
        if ftype in _CONTROL_FRAMES and size > MAX_CONTROL_PAYLOAD:
            problem = f"a {ftype.name} frame is at most {MAX_CONTROL_PAYLOAD} bytes; this one declares {size}"
        elif size > self.config.max_negotiation_payload and self.hello_state is not HelloState.NEGOTIATED:
            problem = (f"frames are at most {self.config.max_negotiation_payload} bytes until HELLO completes; "
                       f"this {ftype.name} frame declares {size}")
        else:
            return
        self._fail(RemoteProtocolError(1001, problem, path="frame"))

    def receive_eof(self, reason: str = "peer closed the connection") -> None:
        """The stream ended: the peer closed its side, or the transport broke
        (``reason`` says how, e.g. a failed TLS handshake)."""
        if self.state is ConnState.CLOSED:
            return
        try:
            self._decoder.close()
        except FramingError as exc:  # a truncated frame (RFC 002 §3.2)
            self._state_to_closed(ConnInput.EOF)
            self._events.append(ConnectionTerminated(code=exc.code, reason=exc.message, by_peer=True))
            return
        if self.role is Role.CLIENT and not self._transport_ready and reason == "peer closed the connection":
            # Nothing AMP came back: the usual cause is a wrong port or scheme.
            reason += " before answering the handshake (an amps:// TLS port, or not an AMP server?)"
        self._state_to_closed(ConnInput.EOF)
        self._events.append(ConnectionTerminated(code=None, reason=reason, by_peer=True))

    def end_of_input(self, now_ms: int) -> None:
        """The peer closed its sending side cleanly, and the stream may still
        be writable (a TCP half-close). With ``drain_on_half_close`` and once
        negotiated, the connection drains rather than closes, so earlier
        invokes still get their one terminal reply (R5): :class:`InputEnded`,
        then the owner closes when nothing is left to answer, or the drain
        period ends it. Otherwise, or on a truncated frame, it is
        :meth:`receive_eof`."""
        if (not self.config.drain_on_half_close or self.state not in (ConnState.OPEN, ConnState.DRAINING)
                or self._decoder.buffered):
            self.receive_eof()
            return
        self._go(ConnInput.INPUT_ENDED)
        self.input_ended = True
        self._ping_payload = self._ping_deadline = None  # it could not answer a PING now
        if self._drain_deadline is None:
            self._drain_deadline = now_ms + self.config.drain_timeout_ms
        self._events.append(InputEnded())

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def send(self, out: Outbound, now_ms: int) -> Envelope | None:
        """Seal (sign) ``out``, frame it and queue it; return the envelope
        (``None`` when ``out`` came sealed already: ``out.wire`` is sent as is).

        Raises ``LocalProtocolError`` unless the connection is OPEN, or
        DRAINING and ``out`` is a reply (``reply_to`` set).
        """
        if self.state is ConnState.DRAINING and out.reply_to is None:
            raise LocalProtocolError(5002, "connection is draining: only replies may be sent", path="state")
        try:
            self.state = advance(self.state, ConnInput.SEND_MESSAGE)
        except StateViolation as exc:
            raise LocalProtocolError(1001, exc.message, path="state") from None
        env: Envelope | None = None
        wire = out.wire
        if wire is None:
            to = out.to if out.to is not None else self.peer_did
            if to is None:
                raise LocalProtocolError(1001, "no recipient: the peer's DID is not known", path="to")
            # A retry reuses the original id *and* timestamp (RFC 001 §16.3), so the
            # signed content is identical and the receiver treats it as a duplicate (R8).
            env, wire = seal_outbound(self.identity, out, now_ms, entropy=self._entropy, to=to,
                                      default_ttl_ms=self.config.default_ttl_ms, v=self._major,
                                      profile=self.config.profile, resolver=self.pipeline.resolver)
        if len(wire) > self.max_msg_size:
            raise MessageTooLarge(len(wire), self.max_msg_size)
        self._queue_frame(FrameType.AMP_MESSAGE, wire)
        return env

    def data_to_send(self) -> bytes:
        """Everything queued since the last call, as one buffer."""
        if not self._out:
            return b""
        data = bytes(self._out)
        self._out = bytearray()  # drop the old allocation: idle connections stay small
        return data

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet taken by :meth:`data_to_send`."""
        return len(self._out)

    def get_timer(self) -> int | None:
        """The next deadline (ms, same clock as ``now_ms``), or ``None``."""
        # The edge asks after every read and send: the steady state (OPEN,
        # nothing outstanding, keepalive on) is answered without a list.
        if (self.state is ConnState.OPEN and self._ping_deadline is None and not self._raw
                and self.config.keepalive_interval_ms is not None and self._frame_since is None):
            return self._last_rx + self.config.keepalive_interval_ms
        deadlines = []
        frame_deadline = self._frame_deadline()
        if frame_deadline is not None:
            deadlines.append(frame_deadline)
        silent_deadline = self._silent_deadline()
        if silent_deadline is not None:
            deadlines.append(silent_deadline)
        if self.state in (ConnState.CONNECTED, ConnState.HANDSHAKE) and self._handshake_deadline is not None:
            deadlines.append(self._handshake_deadline)
        if self.state in (ConnState.OPEN, ConnState.DRAINING) and not self._raw and not self.input_ended:
            if self._ping_deadline is not None:
                deadlines.append(self._ping_deadline)
            elif self.config.keepalive_interval_ms is not None:
                deadlines.append(self._last_rx + self.config.keepalive_interval_ms)
        if self.state is ConnState.DRAINING and self._drain_deadline is not None:
            deadlines.append(self._drain_deadline)
        return min(deadlines) if deadlines else None

    def _frame_deadline(self) -> int | None:
        """When the frame now half-received must be whole, if one is."""
        timeout = self.config.frame_timeout_ms
        if self._frame_since is None or timeout is None or self.state is ConnState.CLOSED:
            return None
        return self._frame_since + timeout

    def _silent_deadline(self) -> int | None:
        """Raw framing has no handshake to time out and no keepalive, so a
        server gives a client that connects and says nothing the handshake
        timeout: otherwise silent sockets could hold every connection slot."""
        if not self._raw or self.role is not Role.SERVER or self._heard or self.state is ConnState.CLOSED:
            return None
        return self._handshake_deadline

    def handle_timer(self, now_ms: int) -> None:
        """Act on every deadline that has passed by ``now_ms``."""
        state = self.state
        frame_deadline = self._frame_deadline()
        if frame_deadline is not None and now_ms >= frame_deadline:
            self._fail(RemoteProtocolError(5003, f"a frame was still arriving {self.config.frame_timeout_ms} ms "
                                                 f"after its first byte ({self._decoder.buffered} bytes so far)"))
            return
        silent_deadline = self._silent_deadline()
        if silent_deadline is not None and now_ms >= silent_deadline:
            self._fail(RemoteProtocolError(5003, "nothing received within "
                                                 f"{self.config.handshake_timeout_ms} ms of connecting"))
            return
        if state in (ConnState.CONNECTED, ConnState.HANDSHAKE):
            if self._handshake_deadline is not None and now_ms >= self._handshake_deadline:
                self._fail(RemoteProtocolError(5003, "handshake and HELLO did not complete in "
                                                     f"{self.config.handshake_timeout_ms} ms"))
            return
        if state not in (ConnState.OPEN, ConnState.DRAINING):
            return
        if state is ConnState.DRAINING and self._drain_deadline is not None and now_ms >= self._drain_deadline:
            self._state_to_closed(ConnInput.CLOSE)
            self._events.append(ConnectionTerminated(code=None, reason="drain period ended"))
            return
        if self._raw or self.input_ended:
            return
        if self._ping_deadline is not None:
            if now_ms >= self._ping_deadline:
                self._fail(RemoteProtocolError(5003, "keepalive: no PONG within "
                                                     f"{self.config.keepalive_timeout_ms} ms"))
            return
        interval = self.config.keepalive_interval_ms
        if interval is not None and now_ms >= self._last_rx + interval:
            self._go(ConnInput.SEND_PING)
            self._ping_payload = self._entropy(_PING_PAYLOAD_SIZE)
            self._ping_deadline = now_ms + self.config.keepalive_timeout_ms
            self._queue_frame(FrameType.PING, self._ping_payload)

    def start_drain(self, now_ms: int, reason: int = 0, message: str = "") -> None:
        """Send GOAWAY and take no new inbound work (RFC 002 §4.6)."""
        if self.state in (ConnState.IDLE, ConnState.CLOSED):
            return
        if not self._raw:
            goaway = GoAway(reason=reason, message=message or None, last_id=self._last_accepted_id)
            self._queue_frame(FrameType.GOAWAY, goaway.to_payload())
        if self.state in (ConnState.OPEN, ConnState.DRAINING):
            self._go(ConnInput.SEND_GOAWAY)
            self.draining_by_us = True
            if self._drain_deadline is None:
                self._drain_deadline = now_ms + self.config.drain_timeout_ms
            return
        # Nothing can be in flight before negotiation: draining is closing.
        self._state_to_closed(ConnInput.CLOSE)
        self._events.append(ConnectionTerminated(code=None, reason="closed during handshake (GOAWAY)"))

    def close(self, reason: str = "closed locally") -> None:
        """Close locally; queued bytes may still be flushed by the edge.
        ``reason`` says why when it was not the owner's choice (the edge
        could not write to the peer)."""
        if self.state is ConnState.CLOSED:
            return
        self._state_to_closed(ConnInput.CLOSE)
        self._events.append(ConnectionTerminated(code=None, reason=reason))

    # ============================================================ frames

    def _on_frame(self, ftype: FrameType, payload: bytes, now_ms: int) -> None:
        if ftype is FrameType.HANDSHAKE:
            self._on_handshake(payload)
        elif not self._transport_ready and ftype is not FrameType.ERROR:
            # RFC 002 §4.4: HANDSHAKE is the first frame in each direction. An
            # ERROR frame is the exception: a server refusing us outright (at
            # its connection limit, say) sends one and closes (§8.2).
            raise RemoteProtocolError(1001, f"{ftype.name} frame before the HANDSHAKE", path="frame")
        elif ftype is FrameType.AMP_MESSAGE:
            self._on_message(payload, now_ms)
        elif ftype is FrameType.PING:
            self._go(ConnInput.RECV_PING)
            self._queue_frame(FrameType.PONG, payload)
        elif ftype is FrameType.PONG:
            self._go(ConnInput.RECV_PONG)
            if self._ping_payload is not None and payload == self._ping_payload:
                self._ping_payload = self._ping_deadline = None
                self._events.append(PingAcknowledged(payload=payload))
        elif ftype is FrameType.GOAWAY:
            goaway = GoAway.from_payload(payload)
            self._go(ConnInput.RECV_GOAWAY)
            self._events.append(GoAwayReceived(reason=goaway.reason, message=goaway.message,
                                               last_id=goaway.last_id))
            if self.state is ConnState.CLOSED:
                self._events.append(ConnectionTerminated(code=None, reason="GOAWAY during handshake",
                                                         by_peer=True))
            elif self._drain_deadline is None:
                self._drain_deadline = now_ms + self.config.drain_timeout_ms
        elif ftype is FrameType.ERROR:
            try:
                err = TransportError.from_payload(payload)
                code, reason = err.code, err.message
            except AmpError as exc:  # the peer is closing either way
                code, reason = exc.code, f"undecodable transport ERROR: {exc.message}"
            self._state_to_closed(ConnInput.RECV_ERROR)
            self._events.append(ConnectionTerminated(code=code, reason=reason, by_peer=True))

    def _on_handshake(self, payload: bytes) -> None:
        if self.role is Role.SERVER:
            self._go(ConnInput.RECV_HANDSHAKE)  # only from CONNECTED: a second one is a violation
            request = HandshakeRequest.from_payload(payload)
            if request.version != TRANSPORT_VERSION:
                response = HandshakeResponse(accepted=False, max_msg_size=self.config.max_msg_size,
                                             error=f"unsupported transport version {request.version}")
                self._queue_frame(FrameType.HANDSHAKE, response.to_payload())
                self._state_to_closed(ConnInput.FAIL)
                self._events.append(ConnectionTerminated(code=1004, reason=response.error or ""))
                return
            self.peer_did_hint = request.did
            self._set_max(request.max_msg_size)
            response = HandshakeResponse(accepted=True, max_msg_size=self.config.max_msg_size)
            self._queue_frame(FrameType.HANDSHAKE, response.to_payload())
            self._transport_ready = True
            self._events.append(HandshakeCompleted(max_msg_size=self.max_msg_size, peer_did_hint=request.did))
            return
        if self._transport_ready:
            raise RemoteProtocolError(1001, "second HANDSHAKE frame", path="frame")
        self._go(ConnInput.RECV_HANDSHAKE_REPLY)
        response = HandshakeResponse.from_payload(payload)
        if not response.accepted:
            self._state_to_closed(ConnInput.FAIL)
            self._events.append(ConnectionTerminated(
                code=None, reason=f"handshake refused: {response.error or 'no reason given'}", by_peer=True))
            return
        self._set_max(response.max_msg_size)
        self._transport_ready = True
        self._events.append(HandshakeCompleted(max_msg_size=self.max_msg_size, peer_did_hint=None))
        self._send_hello(None)

    def _set_max(self, theirs: int) -> None:
        self.max_msg_size = effective_max(self.config.max_msg_size, theirs)
        self._decoder.set_max_size(self.max_msg_size)

    # ========================================================== messages

    def _on_message(self, payload: bytes, now_ms: int) -> None:
        if self.hello_state is not HelloState.NEGOTIATED:
            self._on_pre_hello_message(payload, now_ms)
            return
        try:
            inbound = self.pipeline.check(payload, now_ms)
        except AmpError as exc:
            self._reject(exc, _peek(payload, self.pipeline), authenticated=isinstance(exc, SignedButRefused))
            return
        env = inbound.envelope
        if env.typ == MessageType.HELLO and self._late_hello_allowed:
            self._on_late_hello(inbound, now_ms)
            return
        if env.typ in _HELLO_TYPES:
            self._reject(AmpError(1001, "HELLO negotiation already completed on this connection",
                                  path="typ"), env, authenticated=True)
            return
        if env.v != self._major:
            self._reject(AmpError(1004, f"v = {env.v} but the negotiated major version is {self._major}",
                                  path="v"), env, authenticated=True)
            return
        if self._refused_principal(env):
            return
        if self.draining_by_us and env.typ in _NEW_WORK:
            self._reject(AmpError(5002, "connection is draining (GOAWAY sent): no new work accepted"), env,
                         authenticated=True)
            return
        self._go(ConnInput.RECV_MESSAGE)
        if not inbound.duplicate:
            self._last_accepted_id = env.id
        self._events.append(MessageReceived(inbound=inbound))

    def _on_pre_hello_message(self, payload: bytes, now_ms: int) -> None:
        env = _peek(payload, self.pipeline)
        if env is None or env.typ not in _HELLO_TYPES:
            # RFC 002 A.7: non-handshake AMP message before HELLO completes.
            err = AmpError(1004, "application message before AMP version negotiation completed", path="typ")
            self._reject(err, env, fatal=self.config.close_on_pre_hello)
            return
        try:
            inbound = self.pipeline.check(payload, now_ms)
        except AmpError as exc:
            self._reject(exc, env, fatal=True)  # negotiation cannot proceed on a bad HELLO
            return
        self._on_hello(inbound, now_ms)

    def _on_hello(self, inbound: Inbound, now_ms: int) -> None:
        env, body = inbound.envelope, inbound.body
        typ = env.typ
        if self._expected_peer is not None and env.sender != self._expected_peer:
            raise RemoteProtocolError(3001, f"peer is {env.sender}, expected {self._expected_peer}", path="from")
        if typ == MessageType.HELLO:
            self.hello_state = advance_hello(self.hello_state, HelloInput.RECV_HELLO)
            self._go(ConnInput.HELLO_MESSAGE)
            if self.peer_did_hint is not None and self.config.strict_principal and env.sender != self.peer_did_hint:
                raise RemoteProtocolError(3001, "HELLO sender differs from the HANDSHAKE did", path="from")
            selected = self._select(body)
            if selected is None:
                self._send_control_message(MessageType.HELLO_REJECT, {"reason": "no compatible AMP major version"},
                                           env, now_ms)
                self.hello_state = advance_hello(self.hello_state, HelloInput.SEND_HELLO_REJECT)
                self._state_to_closed(ConnInput.FAIL)
                self._events.append(ConnectionTerminated(code=1004, reason="no compatible AMP version"))
                return
            self._send_control_message(MessageType.HELLO_ACK, {"selected": selected}, env, now_ms)
            self._negotiated(selected, env.sender, advance_hello(self.hello_state, HelloInput.SEND_HELLO_ACK))
        elif typ == MessageType.HELLO_ACK:
            next_state = advance_hello(self.hello_state, HelloInput.RECV_HELLO_ACK)
            selected = body.get("selected") if type(body) is dict else None
            if type(selected) is not str or _major_or_none(selected) not in self.config.majors:
                self.hello_state = HelloState.FAILED
                raise RemoteProtocolError(1004, f"HELLO_ACK selected {quoted(selected)}, which we did not offer",
                                          path="body.selected")
            self._negotiated(selected, env.sender, next_state)
        else:
            self.hello_state = advance_hello(self.hello_state, HelloInput.RECV_HELLO_REJECT)
            reason = body.get("reason") if type(body) is dict else None
            self._state_to_closed(ConnInput.FAIL)
            self._events.append(ConnectionTerminated(
                code=1004, reason=f"HELLO rejected: {reason if type(reason) is str else 'no reason given'}",
                by_peer=True))

    def _on_late_hello(self, inbound: Inbound, now_ms: int) -> None:
        """The first HELLO on a raw connection whose version was preconfigured
        (R3, RFC 002 §3.3: HELLO is optional there, not forbidden).

        If it is addressed to us (or to "whoever you are", the DID of a client
        not told whom it dials) and offers a major version we speak, it gets
        HELLO_ACK, and its sender becomes the connection's peer, with strict
        principal binding from then on, as after a normal HELLO. Otherwise it
        gets no answer and the connection keeps its preconfigured version:
        under raw framing HELLO is also how the public Rust example's clients
        register with a relay (addressed to the relay, offering "0.30.0"),
        and they expect nothing back. A second HELLO is a protocol error like
        any repeated HELLO (1001).
        """
        self._late_hello_allowed = False
        env = inbound.envelope
        if not (addressed_to(env.to, self.identity.did) or addressed_to(env.to, UNKNOWN_PEER_DID)):
            return  # for someone else (a relay): not a negotiation with us
        if self._refused_principal(env):
            return
        try:
            selected = self._select(inbound.body)
        except AmpError as exc:
            self._reject(exc, env, authenticated=True)
            return
        if selected is None or major_of(selected) != self._major:
            return
        self._send_control_message(MessageType.HELLO_ACK, {"selected": selected}, env, now_ms)
        if self.peer_did is None:
            self.peer_did = env.sender
            self._events.append(Negotiated(version=selected, peer_did=env.sender))

    def _refused_principal(self, env: Envelope) -> bool:
        """RFC 002 §7.1/§7.2 strict principal binding: a message whose
        ``from`` is not the DID that negotiated the connection gets ERROR
        3001, and the connection closes. True when it was refused."""
        if self.config.strict_principal and self.peer_did is not None and env.sender != self.peer_did:
            self._reject(AmpError(3001, "from differs from the DID that negotiated this connection",
                                  path="from"), env, fatal=True, authenticated=True)
            return True
        return False

    def _select(self, body: Any) -> str | None:
        versions = body.get("versions") if type(body) is dict else None
        if type(versions) is not list or not versions or not all(type(v) is str for v in versions):
            raise RemoteProtocolError(1001, "HELLO body needs a non-empty 'versions' array of text",
                                      path="body.versions")
        ours = {major_of(v): v for v in reversed(self.config.versions)}  # first listed wins per major
        for theirs in versions:  # the peer's preference order (RFC 001 §13.3)
            major = _major_or_none(theirs)
            if major in ours:
                return ours[major]
        return None

    def _negotiated(self, version: str, peer: str | None, hello_state: HelloState) -> None:
        self.hello_state = hello_state
        self.negotiated_version = version
        self._major = major_of(version)
        self.peer_did = peer
        self._go(ConnInput.NEGOTIATED)
        self._events.append(Negotiated(version=version, peer_did=peer))

    def _send_hello(self, now_ms: int | None) -> None:
        now = self._last_rx if now_ms is None else now_ms
        body = {"versions": list(self.config.versions),
                "agent_info": {"name": self.config.agent_name, "implementation": self.config.implementation}}
        env, wire = seal(self.identity, typ=MessageType.HELLO, to=self._expected_peer or UNKNOWN_PEER_DID,
                         body=body, now_ms=now, entropy=self._entropy, ttl=self.config.handshake_timeout_ms,
                         v=1, profile=self.config.profile)
        self._hello_id = env.id
        self.hello_state = advance_hello(self.hello_state, HelloInput.SEND_HELLO)
        self._go(ConnInput.HELLO_MESSAGE)
        self._queue_frame(FrameType.AMP_MESSAGE, wire)

    def _send_control_message(self, typ: int, body: Any, about: Envelope, now_ms: int) -> None:
        """HELLO_ACK / HELLO_REJECT / ERROR replies (always ``v = 1`` for the
        HELLO family, RFC 001 §13.1)."""
        v = 1 if typ in _HELLO_TYPES else self._major
        _, wire = seal(self.identity, typ=typ, to=about.sender, body=body, now_ms=now_ms,
                       entropy=self._entropy, ttl=self.config.default_ttl_ms, reply_to=about.id,
                       thread_id=about.thread_id, v=v, profile=self.config.profile)
        self._queue_frame(FrameType.AMP_MESSAGE, wire)

    # ========================================================== failures

    def _reject(self, err: AmpError, env: Envelope | None, *, fatal: bool = False,
                authenticated: bool = False) -> None:
        """Answer one bad message; close too when ``fatal``."""
        self._events.append(MessageRejected(error=err, message_id=env.id if env is not None else None, envelope=env,
                                            authenticated=authenticated))
        negotiated = self.hello_state is HelloState.NEGOTIATED
        if env is not None and (negotiated or self._raw):
            # A bad ERROR gets no answer of any kind, transport ERROR included:
            # the peer closes on a transport ERROR, and two peers answering
            # each other's errors would never stop. It is logged (the event).
            if env.typ != _ERROR_TYPE:
                self._send_control_message(MessageType.ERROR, err.to_body(), env, self._last_rx)
        elif not self._raw:
            self._queue_transport_error(err, env.id if env is not None else None)
        if fatal:
            self._state_to_closed(ConnInput.FAIL)
            self._events.append(ConnectionTerminated(code=err.code, reason=err.message))

    def _fail(self, err: AmpError) -> None:
        """A connection-level failure: transport ERROR frame (RFC 002 §4.5), close."""
        if self.state is ConnState.CLOSED:
            return
        if not self._raw and self.state is not ConnState.IDLE:
            self._queue_transport_error(err, None)
        self._state_to_closed(ConnInput.FAIL)
        self._events.append(ConnectionTerminated(code=err.code, reason=err.message))

    def _queue_transport_error(self, err: AmpError, msg_id: bytes | None) -> None:
        message = err.message if err.path is None else f"{err.message} (at {err.path})"
        self._queue_frame(FrameType.ERROR, TransportError(code=err.code, message=message, msg_id=msg_id).to_payload())

    # ============================================================ helpers

    def _go(self, event: ConnInput) -> None:
        self.state = advance(self.state, event)

    def _state_to_closed(self, event: ConnInput) -> None:
        self.state = advance(self.state, event)
        self._ping_deadline = self._handshake_deadline = self._drain_deadline = None

    def _queue_frame(self, ftype: FrameType, payload: bytes) -> None:
        if self._raw:
            if ftype is not FrameType.AMP_MESSAGE:
                return  # raw framing has no control frames (R3)
            self._out += encode_frame(ftype, payload, Framing.RAW)
        else:
            self._out += encode_frame(ftype, payload)


def _peek(payload: bytes, pipeline: ReceivePipeline) -> Envelope | None:
    """The envelope when the bytes at least decode to one (for a return path)."""
    try:
        return decode_envelope(payload, pipeline.limits)
    except AmpError:
        return None


def _major_or_none(version: str) -> int | None:
    try:
        return major_of(version)
    except (ValueError, AttributeError):
        return None
