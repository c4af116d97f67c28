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

from typing import TYPE_CHECKING

from ..errors import AmpError, LocalProtocolError, MessageTooLarge, RemoteProtocolError, SignedButRefused
from ..wire.envelope import Envelope
from ..wire.frames import FrameType, FramingError
from ..wire.registry import MessageType
from ..wire.transport import MAX_CONTROL_PAYLOAD, GoAway, HandshakeRequest, TransportError
from .sealing import seal_outbound
from .events import (
    ConnectionTerminated,
    Event,
    GoAwayReceived,
    InputEnded,
    HandshakeCompleted,
    MessageReceived,
    PingAcknowledged,
)
from .handshake import HELLO_TYPES, Handshake, Role, peek_envelope
from .state import ConnInput, ConnState, HelloInput, HelloState, StateViolation, advance, advance_hello

if TYPE_CHECKING:  # for type hints only: nothing of outbound runs here
    from .outbound import Outbound

__all__ = ["Connection", "Role"]

# Frames whose payload is a small CBOR map (decoded with MAX_CONTROL_PAYLOAD as
# a limit anyway): refused from the header when they declare more.
_CONTROL_FRAMES = frozenset({FrameType.HANDSHAKE, FrameType.GOAWAY, FrameType.ERROR})
# New work that a draining connection refuses with 5002 (replies still pass).
_NEW_WORK = frozenset({MessageType.CAP_INVOKE, MessageType.CAP_QUERY})
_PING_PAYLOAD_SIZE = 8


class Connection(Handshake):
    """The protocol state of one AMP connection (either role): the API the
    edge calls, and every frame and message after the opening
    (:class:`~.handshake.Handshake`)."""

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

    # ========================================================== messages

    def _on_message(self, payload: bytes, now_ms: int) -> None:
        if self.hello_state is not HelloState.NEGOTIATED:
            self._on_pre_hello_message(payload, now_ms)
            return
        try:
            inbound = self.pipeline.check(payload, now_ms)
        except AmpError as exc:
            self._reject(exc, peek_envelope(payload, self.pipeline), authenticated=isinstance(exc, SignedButRefused))
            return
        env = inbound.envelope
        if env.typ == MessageType.HELLO and self._late_hello_allowed:
            self._on_late_hello(inbound, now_ms)
            return
        if env.typ in HELLO_TYPES:
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
