"""The opening of an AMP connection, sans-I/O: the RFC 002 HANDSHAKE frames
and the RFC 001 §13 HELLO negotiation, and how the connection answers a
message or a failure (which the opening needs as much as what follows it).

:class:`Handshake` holds the connection's state; :class:`~.connection.Connection`
builds on it with the API the edge calls (bytes in, events and bytes out,
timers, draining) and the handling of every message after HELLO. See
:mod:`.connection` for the sequence and how failures are answered.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Any

from ..display import quoted
from ..errors import AmpError, RemoteProtocolError
from ..wire.envelope import Envelope, decode_envelope, seal
from ..wire.frames import FrameDecoder, FrameType, Framing, encode_frame
from ..wire.identity import Identity
from ..wire.receive import Inbound, ReceivePipeline, addressed_to
from ..wire.registry import MessageType
from ..wire.transport import TRANSPORT_VERSION, HandshakeRequest, HandshakeResponse, TransportError, effective_max
from .config import UNKNOWN_PEER_DID, ConnectionConfig, major_of
from ..wire.extensions import agreed
from .events import ConnectionTerminated, Event, HandshakeCompleted, MessageRejected, Negotiated
from .state import ConnInput, ConnState, HelloInput, HelloState, advance, advance_hello

__all__ = ["HELLO_TYPES", "Handshake", "Role", "peek_envelope"]

HELLO_TYPES = frozenset({MessageType.HELLO, MessageType.HELLO_ACK, MessageType.HELLO_REJECT})
_ERROR_TYPE = int(MessageType.ERROR)


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class Handshake:
    """The state of one AMP connection (either role) and its opening.
    Use :class:`~.connection.Connection`, which adds everything else."""

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
        # ampcap extensions both sides announced in HELLO (wire/extensions.py)
        self.extensions: frozenset[str] = frozenset()
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

    # ======================================================= handshake

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

    # =========================================================== HELLO

    def _on_pre_hello_message(self, payload: bytes, now_ms: int) -> None:
        env = peek_envelope(payload, self.pipeline)
        if env is None or env.typ not in HELLO_TYPES:
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
            self.extensions = agreed(self.config.extensions, body)
            ack: dict[str, Any] = {"selected": selected}
            if self.extensions:  # only to a peer that offered some: others see the RFC's body exactly
                ack["extensions"] = sorted(self.extensions)
            self._send_control_message(MessageType.HELLO_ACK, ack, env, now_ms)
            self._negotiated(selected, env.sender, advance_hello(self.hello_state, HelloInput.SEND_HELLO_ACK))
        elif typ == MessageType.HELLO_ACK:
            next_state = advance_hello(self.hello_state, HelloInput.RECV_HELLO_ACK)
            selected = body.get("selected") if type(body) is dict else None
            if type(selected) is not str or _major_or_none(selected) not in self.config.majors:
                self.hello_state = HelloState.FAILED
                raise RemoteProtocolError(1004, f"HELLO_ACK selected {quoted(selected)}, which we did not offer",
                                          path="body.selected")
            self.extensions = agreed(self.config.extensions, body)
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
        body: dict[str, Any] = {"versions": list(self.config.versions),
                "agent_info": {"name": self.config.agent_name, "implementation": self.config.implementation}}
        if self.config.extensions:
            body["extensions"] = list(self.config.extensions)
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
        v = 1 if typ in HELLO_TYPES else self._major
        _, wire = seal(self.identity, typ=typ, to=about.sender, body=body, now_ms=now_ms,
                       entropy=self._entropy, ttl=self.config.default_ttl_ms, reply_to=about.id,
                       thread_id=about.thread_id, v=v, profile=self.config.profile)
        self._queue_frame(FrameType.AMP_MESSAGE, wire)

    # ======================================================== failures

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

    # ========================================================= helpers

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


def peek_envelope(payload: bytes, pipeline: ReceivePipeline) -> Envelope | None:
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
