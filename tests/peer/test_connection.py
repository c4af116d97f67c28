"""Sans-I/O tests of the Connection: two Connections shuttling bytes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from conn_helpers import T0, Outbound, Pair, drain_events, entropy_from, identity, make_conn, open_pair  # noqa: E402

from ampcap.errors import AmpError, LocalProtocolError  # noqa: E402
from ampcap.peer.config import ConnectionConfig  # noqa: E402
from ampcap.peer.connection import Connection, Role  # noqa: E402
from ampcap.peer.events import (  # noqa: E402
    ConnectionTerminated,
    GoAwayReceived,
    InputEnded,
    HandshakeCompleted,
    MessageReceived,
    MessageRejected,
    Negotiated,
    PingAcknowledged,
)
from ampcap.peer.state import ConnState, HelloState  # noqa: E402
from ampcap.wire.envelope import seal  # noqa: E402
from ampcap.wire.frames import MIN_MAX_SIZE, Frame, FrameDecoder, FrameType, Framing, encode_frame  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402
from ampcap.wire.transport import GoAway, HandshakeRequest, HandshakeResponse, TransportError  # noqa: E402

MIB = MIN_MAX_SIZE


def frames_of(data: bytes, framing: Framing = Framing.RFC002) -> list[Frame]:
    return FrameDecoder(64 << 20, framing).feed(data)


def of_type(events: list[Any], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


def amp_frame(seed: int, typ: int, body: Any, *, to: str, v: int = 1, now: int = T0, **kw: Any) -> bytes:
    _, wire = seal(identity(seed), typ=typ, to=to, body=body, now_ms=now, entropy=entropy_from(99), v=v, **kw)
    return encode_frame(FrameType.AMP_MESSAGE, wire)


def server_after_handshake(config: ConnectionConfig | None = None) -> Connection:
    """A server that has answered a hand-made HANDSHAKE but seen no HELLO."""
    server = make_conn(Role.SERVER, 2, config)
    server.start(T0)
    server.receive_data(encode_frame(FrameType.HANDSHAKE, HandshakeRequest(
        max_msg_size=MIB, did=identity(1).did).to_payload()), T0)
    server.data_to_send()
    drain_events(server)
    return server


# ------------------------------------------------------------ R4 sequence


def test_r4_sequence_opens_both_sides() -> None:
    client = make_conn(Role.CLIENT, 1, ConnectionConfig(max_msg_size=2 * MIB))
    server = make_conn(Role.SERVER, 2)
    client.start(T0)
    server.start(T0)
    first = client.data_to_send()
    (frame,) = frames_of(first)
    assert frame.type is FrameType.HANDSHAKE
    request = HandshakeRequest.from_payload(frame.payload)
    assert (request.version, request.max_msg_size, request.did) == (1, 2 * MIB, identity(1).did)
    server.receive_data(first, T0)
    reply = server.data_to_send()
    (frame,) = frames_of(reply)
    assert HandshakeResponse.from_payload(frame.payload).accepted
    assert server.state is ConnState.HANDSHAKE
    client.receive_data(reply, T0)
    # The client's HELLO follows in the same turn.
    assert client.hello_state is HelloState.WAIT_ACK
    pair = Pair(client, server)
    pair.shuttle()
    assert client.state is server.state is ConnState.OPEN
    assert client.hello_state is server.hello_state is HelloState.NEGOTIATED
    assert client.negotiated_version == server.negotiated_version == "1.0"
    assert client.peer_did == identity(2).did and server.peer_did == identity(1).did
    assert client.max_msg_size == server.max_msg_size == 2 * MIB
    server_events = drain_events(server) + pair.server_events
    assert [type(e) for e in server_events] == [HandshakeCompleted, Negotiated]
    assert server_events[0].peer_did_hint == identity(1).did
    assert [type(e) for e in pair.client_events] == [HandshakeCompleted, Negotiated]


def test_hello_body_and_envelope() -> None:
    server = server_after_handshake()
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    client.data_to_send()
    client.receive_data(encode_frame(FrameType.HANDSHAKE, HandshakeResponse(
        accepted=True, max_msg_size=MIB).to_payload()), T0)
    (frame,) = frames_of(client.data_to_send())
    inbound = server.pipeline.check(frame.payload, T0)
    assert inbound.envelope.typ == MessageType.HELLO and inbound.envelope.v == 1
    assert inbound.body["versions"] == ["1.0"]
    assert inbound.body["agent_info"]["name"] == "ampcap"
    assert inbound.body["agent_info"]["implementation"].startswith("ampcap/")


def test_peer_max_below_one_mib_is_raised_to_one_mib() -> None:
    server = make_conn(Role.SERVER, 2)
    server.start(T0)
    server.receive_data(encode_frame(FrameType.HANDSHAKE, HandshakeRequest(max_msg_size=1000).to_payload()), T0)
    assert server.max_msg_size == MIB
    assert isinstance(drain_events(server)[0], HandshakeCompleted)


def test_config_refuses_a_local_max_under_one_mib() -> None:
    with pytest.raises(ValueError):
        ConnectionConfig(max_msg_size=MIB - 1)


def test_handshake_refused_closes_client() -> None:
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    client.receive_data(encode_frame(FrameType.HANDSHAKE, HandshakeResponse(
        accepted=False, max_msg_size=MIB, error="go away").to_payload()), T0)
    (ev,) = drain_events(client)
    assert isinstance(ev, ConnectionTerminated) and "go away" in ev.reason
    assert client.state is ConnState.CLOSED


def test_first_frame_not_handshake_is_fatal() -> None:
    server = make_conn(Role.SERVER, 2)
    server.start(T0)
    server.receive_data(encode_frame(FrameType.PING, b"hi"), T0)
    (frame,) = frames_of(server.data_to_send())
    assert frame.type is FrameType.ERROR and TransportError.from_payload(frame.payload).code == 1001
    assert server.state is ConnState.CLOSED


def test_hello_reject_when_no_common_major() -> None:
    pair = open_pair(client_cfg=ConnectionConfig(versions=("2.0",)))
    assert pair.client.state is pair.server.state is ConnState.CLOSED
    assert pair.server.hello_state is pair.client.hello_state is HelloState.FAILED
    (term,) = of_type(pair.client_events, ConnectionTerminated)
    assert term.code == 1004 and term.by_peer
    (term,) = of_type(pair.server_events, ConnectionTerminated)
    assert term.code == 1004


def test_server_picks_the_clients_preferred_common_version() -> None:
    pair = open_pair(client_cfg=ConnectionConfig(versions=("2.0", "1.0")))
    assert pair.client.negotiated_version == pair.server.negotiated_version == "1.0"


def test_handshake_timeout() -> None:
    server = make_conn(Role.SERVER, 2)
    server.start(T0)
    assert server.get_timer() == T0 + 10_000
    server.handle_timer(T0 + 9_999)
    assert server.state is ConnState.CONNECTED
    server.handle_timer(T0 + 10_000)
    (frame,) = frames_of(server.data_to_send())
    assert TransportError.from_payload(frame.payload).code == 5003
    assert drain_events(server)[-1].code == 5003


def test_hello_timeout_after_transport_handshake() -> None:
    server = server_after_handshake()
    server.handle_timer(T0 + 10_000)
    assert server.state is ConnState.CLOSED


# ---------------------------------------------------------- RFC 002 A.7


def test_pre_hello_application_message_is_rejected_and_closed() -> None:
    server = server_after_handshake()
    server.receive_data(amp_frame(1, MessageType.MESSAGE, {"text": "hi"}, to=identity(2).did), T0)
    events = drain_events(server)
    assert isinstance(events[0], MessageRejected) and events[0].error.code == 1004
    assert isinstance(events[-1], ConnectionTerminated) and server.state is ConnState.CLOSED
    (frame,) = frames_of(server.data_to_send())
    err = TransportError.from_payload(frame.payload)
    assert frame.type is FrameType.ERROR and err.code == 1004 and err.msg_id == events[0].message_id


def test_pre_hello_message_can_leave_connection_open_by_policy() -> None:
    server = server_after_handshake(ConnectionConfig(close_on_pre_hello=False))
    server.receive_data(amp_frame(1, MessageType.MESSAGE, {"text": "hi"}, to=identity(2).did), T0)
    (ev,) = drain_events(server)
    assert isinstance(ev, MessageRejected) and ev.error.code == 1004
    assert server.state is ConnState.HANDSHAKE


# --------------------------------------------------- frames (A.1, A.2, A.5)


def test_a1_frame_parsed_as_message_and_rejected_as_invalid_envelope() -> None:
    pair = open_pair()
    pair.server.receive_data(bytes.fromhex("0000000501a1617801"), T0)
    (ev,) = drain_events(pair.server)
    assert isinstance(ev, MessageRejected) and ev.error.code == 1001 and ev.message_id is None
    (frame,) = frames_of(pair.server.data_to_send())
    assert frame.type is FrameType.ERROR and TransportError.from_payload(frame.payload).code == 1001
    assert pair.server.state is ConnState.OPEN  # the framing itself was fine


def test_a2_length_mismatch_is_rejected() -> None:
    pair = open_pair()
    pair.server.receive_data(bytes.fromhex("0000000401a1617801"), T0)
    ev = drain_events(pair.server)
    assert isinstance(ev[0], MessageRejected) and ev[0].error.code == 1001  # a16178 is not CBOR
    pair.server.receive_eof()  # the stray 01 is a truncated frame
    (term,) = drain_events(pair.server)
    assert isinstance(term, ConnectionTerminated) and term.code == 1001


def test_a5_oversize_frame_gets_transport_error_then_close() -> None:
    pair = open_pair(ConnectionConfig(max_msg_size=MIB), ConnectionConfig(max_msg_size=MIB))
    assert pair.server.max_msg_size == MIB
    header = (MIB + 2).to_bytes(4, "big") + bytes([FrameType.AMP_MESSAGE])  # payload 1 MiB + 1
    pair.server.receive_data(header + b"\0" * 100, T0)
    (frame,) = frames_of(pair.server.data_to_send())
    assert frame.type is FrameType.ERROR and TransportError.from_payload(frame.payload).code == 1001
    (term,) = drain_events(pair.server)
    assert isinstance(term, ConnectionTerminated) and term.code == 1001
    assert pair.server.state is ConnState.CLOSED


def test_exactly_one_mib_payload_is_accepted_by_framing() -> None:
    pair = open_pair(ConnectionConfig(max_msg_size=MIB), ConnectionConfig(max_msg_size=MIB))
    pair.server.receive_data(encode_frame(FrameType.AMP_MESSAGE, b"\xa0" * MIB), T0)
    (ev,) = drain_events(pair.server)
    assert isinstance(ev, MessageRejected)  # not CBOR, but framed fine
    assert pair.server.state is ConnState.OPEN


def _refusal(conn: Connection) -> tuple[int, str]:
    (frame,) = frames_of(conn.data_to_send())
    assert frame.type is FrameType.ERROR
    (term,) = drain_events(conn)
    assert isinstance(term, ConnectionTerminated) and conn.state is ConnState.CLOSED
    err = TransportError.from_payload(frame.payload)
    assert term.code == err.code
    return err.code, err.message


def _header(ftype: FrameType, payload_size: int) -> bytes:
    return (payload_size + 1).to_bytes(4, "big") + bytes([ftype])


def test_before_the_handshake_a_large_frame_is_refused_from_its_header() -> None:
    """Nobody is authenticated yet: a HANDSHAKE that declares 16 MiB must not
    get to park 16 MiB of our memory while it trickles in (it used to, per
    connection, until the handshake timeout)."""
    server = make_conn(Role.SERVER, 2)
    server.start(T0)
    server.receive_data(_header(FrameType.HANDSHAKE, (16 << 20) - 1) + b"\0" * 1000, T0)
    code, message = _refusal(server)
    assert code == 1001 and "HANDSHAKE" in message and str((16 << 20) - 1) in message


def test_between_handshake_and_hello_frames_are_bounded_by_the_negotiation_limit() -> None:
    config = ConnectionConfig(max_negotiation_payload=4096)
    server = server_after_handshake(config)
    assert server.max_msg_size == MIB
    server.receive_data(_header(FrameType.AMP_MESSAGE, 4097) + b"\xa5" * 100, T0)
    code, message = _refusal(server)
    assert code == 1001 and "until HELLO completes" in message and "4097" in message

    # At the limit the frame is received (and then rejected as a pre-HELLO message, A.7).
    server = server_after_handshake(config)
    server.receive_data(_header(FrameType.AMP_MESSAGE, 4096) + b"\xa5" * 100, T0)
    assert server.state is not ConnState.CLOSED and server.incoming_frame_size == 4096
    assert drain_events(server) == []


def test_a_hello_and_anything_after_it_may_use_the_whole_effective_maximum() -> None:
    pair = open_pair(ConnectionConfig(max_negotiation_payload=4096), ConnectionConfig(max_msg_size=MIB))
    pair.server.receive_data(_header(FrameType.AMP_MESSAGE, MIB) + b"\xa5" * 100, T0)
    assert pair.server.state is ConnState.OPEN and pair.server.incoming_frame_size == MIB
    # A PING is opaque bytes (RFC 002 §4.3): only the effective maximum bounds it.
    pair = open_pair()
    pair.server.receive_data(_header(FrameType.PING, 200_000) + b"\0" * 100, T0)
    assert pair.server.state is ConnState.OPEN and pair.server.incoming_frame_size == 200_000


@pytest.mark.parametrize("ftype", [FrameType.GOAWAY, FrameType.ERROR, FrameType.HANDSHAKE], ids=lambda t: t.name)
def test_a_control_frame_larger_than_a_control_payload_can_be_is_refused_from_its_header(ftype: FrameType) -> None:
    pair = open_pair()
    pair.server.receive_data(_header(ftype, 64 * 1024 + 1) + b"\0" * 100, T0)
    code, message = _refusal(pair.server)
    assert code == 1001 and ftype.name in message and "65537" in message


def test_incoming_frame_size_follows_the_frame_being_received() -> None:
    pair = open_pair()
    assert pair.server.incoming_frame_size == 0
    frame = amp_frame(1, MessageType.MESSAGE, {"text": "x" * 3000}, to=identity(2).did)
    pair.server.receive_data(frame[:3], T0)
    assert pair.server.incoming_frame_size == 0  # no whole header yet
    pair.server.receive_data(frame[3:100], T0)
    assert pair.server.incoming_frame_size == len(frame) - 5
    pair.server.receive_data(frame[100:], T0)
    assert pair.server.incoming_frame_size == 0
    assert of_type(drain_events(pair.server), MessageReceived)


# ------------------------------------------------------ messages after OPEN


def test_application_message_round_trip() -> None:
    pair = open_pair()
    env = pair.client.send(Outbound(typ=MessageType.MESSAGE, body={"text": "hello"}), pair.now)
    assert env.to == identity(2).did and env.v == 1
    pair.shuttle()
    (ev,) = of_type(pair.server_events, MessageReceived)
    assert ev.inbound.envelope.id == env.id and ev.inbound.body == {"text": "hello"}


def _error_reply(pair: Pair) -> Any:
    (ev,) = of_type(pair.client_events, MessageReceived)
    assert ev.inbound.envelope.typ == MessageType.ERROR
    return ev.inbound


def test_bad_version_after_negotiation_is_1004() -> None:
    pair = open_pair()
    wire = amp_frame(1, MessageType.MESSAGE, {"text": "x"}, to=identity(2).did, v=2)
    pair.server.receive_data(wire, T0)
    pair.shuttle()
    (rej,) = of_type(pair.server_events, MessageRejected)
    assert rej.error.code == 1004
    reply = _error_reply(pair)
    assert reply.body["code"] == 1004 and reply.envelope.reply_to == rej.message_id
    assert pair.server.state is ConnState.OPEN


def test_a_bad_error_message_gets_no_answer_and_the_connection_stays_open() -> None:
    # An ERROR body that breaks the schema (no category): logged as a rejection,
    # answered with nothing at all. An AMP ERROR would invite another back, and
    # a transport ERROR makes the peer close (RFC 002 §4.5 frames end connections here).
    from ampcap.schema import load_schemas
    from ampcap.wire.identity import DidKeyResolver
    from ampcap.wire.receive import ReceivePipeline

    pair = open_pair()
    pair.server.pipeline = ReceivePipeline(DidKeyResolver(), schemas=load_schemas())  # as the daemon's checks bodies
    wire = amp_frame(1, MessageType.ERROR, {"code": 5001, "message": "no category"}, to=identity(2).did)
    pair.server.receive_data(wire, T0)
    (rej,) = of_type(drain_events(pair.server), MessageRejected)
    assert rej.error.code == 1001
    assert pair.server.data_to_send() == b""
    assert pair.server.state is ConnState.OPEN


def test_a_server_refusing_with_an_error_frame_before_the_handshake_is_heard() -> None:
    # What ampcap's listener sends at its connection limit: the client reports
    # the server's 5004 and message, not "ERROR frame before the HANDSHAKE".
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    client.data_to_send()  # our HANDSHAKE
    refusal = TransportError(code=5004, message="too many connections; retry later").to_payload()
    client.receive_data(encode_frame(FrameType.ERROR, refusal), T0)
    (term,) = drain_events(client)
    assert isinstance(term, ConnectionTerminated) and term.by_peer
    assert (term.code, term.reason) == (5004, "too many connections; retry later")
    assert client.state is ConnState.CLOSED
    # Any other frame first is still a protocol violation.
    other = make_conn(Role.CLIENT, 1)
    other.start(T0)
    other.receive_data(encode_frame(FrameType.PING, b"12345678"), T0)
    (term,) = drain_events(other)
    assert isinstance(term, ConnectionTerminated) and term.code == 1001 and "before the HANDSHAKE" in term.reason


def test_unknown_type_is_1005() -> None:
    pair = open_pair()
    pair.server.receive_data(amp_frame(1, 0x99, None, to=identity(2).did), T0)
    pair.shuttle()
    assert _error_reply(pair).body["code"] == 1005


def test_error_messages_are_never_answered_with_error() -> None:
    pair = open_pair()
    pair.server.receive_data(amp_frame(1, MessageType.ERROR, {"code": 1}, to=identity(2).did, v=2), T0)
    pair.shuttle()
    assert of_type(pair.server_events, MessageRejected)
    assert not of_type(pair.client_events, MessageReceived)


def test_strict_principal_binding_3001_then_close() -> None:
    pair = open_pair()
    pair.server.receive_data(amp_frame(3, MessageType.MESSAGE, {"text": "x"}, to=identity(2).did), T0)
    pair.shuttle()
    assert pair.server.state is ConnState.CLOSED
    (rej,) = of_type(pair.server_events, MessageRejected)
    assert rej.error.code == 3001


def test_second_hello_is_refused() -> None:
    pair = open_pair()
    pair.server.receive_data(amp_frame(1, MessageType.HELLO, {"versions": ["1.0"]}, to=identity(2).did), T0)
    pair.shuttle()
    assert _error_reply(pair).body["code"] == 1001


def test_send_before_open_is_a_local_error() -> None:
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    with pytest.raises(LocalProtocolError):
        client.send(Outbound(typ=MessageType.MESSAGE, body=None, to=identity(2).did), T0)


def test_expected_peer_mismatch_is_3001() -> None:
    pair = open_pair(peer_did=identity(5).did)
    assert pair.client.state is ConnState.CLOSED
    (term,) = of_type(pair.client_events, ConnectionTerminated)
    assert term.code == 3001


# ------------------------------------------------------------- keepalive


def test_ping_is_answered_with_pong_echo() -> None:
    pair = open_pair()
    pair.server.receive_data(encode_frame(FrameType.PING, b"abc"), T0)
    (frame,) = frames_of(pair.server.data_to_send())
    assert (frame.type, frame.payload) == (FrameType.PONG, b"abc")


def test_keepalive_ping_and_pong() -> None:
    pair = open_pair()
    assert pair.client.get_timer() == T0 + 30_000
    pair.now = T0 + 30_000
    pair.client.handle_timer(pair.now)
    assert pair.client.get_timer() == T0 + 40_000
    pair.shuttle()
    assert len(of_type(pair.client_events, PingAcknowledged)) == 1
    assert pair.client.get_timer() == pair.now + 30_000  # idle timer restarted by the PONG


def test_keepalive_timeout_closes() -> None:
    pair = open_pair()
    pair.client.handle_timer(T0 + 30_000)
    (frame,) = frames_of(pair.client.data_to_send())
    assert frame.type is FrameType.PING
    pair.client.handle_timer(T0 + 39_999)
    assert pair.client.state is ConnState.OPEN
    pair.client.handle_timer(T0 + 40_000)
    assert pair.client.state is ConnState.CLOSED
    assert drain_events(pair.client)[-1].code == 5003
    (frame,) = frames_of(pair.client.data_to_send())
    assert frame.type is FrameType.ERROR


def _frame_cut_at(cut: int) -> tuple[bytes, bytes]:
    frame = encode_frame(FrameType.PING, b"p" * 1000)
    return frame[:cut], frame[cut:]


def test_a_frame_trickled_in_is_cut_off_a_minute_after_its_first_byte() -> None:
    # Trickled bytes count as traffic (no keepalive PING is ever due), so only
    # the frame deadline stops a peer holding a half frame in our memory.
    pair = open_pair()
    start = pair.now + 1_000
    frame = encode_frame(FrameType.PING, b"p" * 1000)
    pair.server.receive_data(frame[:10], start)
    for i in range(10, 600, 10):  # a byte run every second: never idle
        pair.server.receive_data(frame[i:i + 10], start + i * 100)
        assert pair.server.get_timer() <= start + 60_000  # more of the same frame does not extend it
    assert pair.server.get_timer() == start + 60_000  # the keepalive deadline (last byte + 30 s) is later
    pair.server.handle_timer(start + 59_999)
    assert pair.server.state is ConnState.OPEN
    pair.server.handle_timer(start + 60_000)
    assert pair.server.state is ConnState.CLOSED
    term = drain_events(pair.server)[-1]
    assert isinstance(term, ConnectionTerminated) and term.code == 5003
    assert "still arriving 60000 ms after its first byte (600 bytes so far)" in term.reason
    (error,) = frames_of(pair.server.data_to_send())
    assert error.type is FrameType.ERROR


def test_each_frame_gets_its_own_minute() -> None:
    pair = open_pair(server_cfg=ConnectionConfig(keepalive_interval_ms=None))  # the frame deadline alone
    head, tail = _frame_cut_at(500)
    pair.server.receive_data(head, pair.now)
    assert pair.server.get_timer() == pair.now + 60_000
    later = pair.now + 50_000
    pair.server.receive_data(tail + head, later)  # one frame completes, the next begins
    assert pair.server.get_timer() == later + 60_000
    pair.server.handle_timer(pair.now + 60_000)
    assert pair.server.state is ConnState.OPEN
    pair.server.receive_data(tail, later + 1)  # nothing half-received: no deadline
    assert pair.server.get_timer() is None


def test_the_frame_deadline_can_be_turned_off() -> None:
    pair = open_pair(server_cfg=ConnectionConfig(frame_timeout_ms=None, keepalive_interval_ms=None))
    head, _ = _frame_cut_at(500)
    pair.server.receive_data(head, pair.now)
    assert pair.server.get_timer() is None
    pair.server.handle_timer(pair.now + 10**9)
    assert pair.server.state is ConnState.OPEN
    with pytest.raises(ValueError, match="frame_timeout_ms"):
        ConnectionConfig(frame_timeout_ms=0)


# ------------------------------------------------------------------ GOAWAY


def test_goaway_drain() -> None:
    pair = open_pair()
    invoke = pair.client.send(Outbound(typ=MessageType.CAP_INVOKE, body={"capability": "x"}), pair.now)
    pair.shuttle()
    pair.server.start_drain(pair.now, reason=0, message="bye")
    assert pair.server.state is ConnState.DRAINING
    # A new invoke the client sent before it saw the GOAWAY is refused with 5002.
    late = pair.client.send(Outbound(typ=MessageType.CAP_INVOKE, body={"capability": "y"}), pair.now)
    pair.shuttle()
    (goaway,) = of_type(pair.client_events, GoAwayReceived)
    assert goaway.message == "bye" and goaway.last_id is not None
    assert pair.client.state is ConnState.DRAINING
    (rej,) = of_type(pair.server_events, MessageRejected)
    assert rej.error.code == 5002 and rej.message_id == late.id
    # Replies still flow; new requests do not.
    pair.server.send(Outbound(typ=MessageType.CAP_RESULT, body={"ok": True}, reply_to=invoke.id), pair.now)
    with pytest.raises(LocalProtocolError):
        pair.server.send(Outbound(typ=MessageType.CAP_INVOKE, body={}), pair.now)
    with pytest.raises(LocalProtocolError):
        pair.client.send(Outbound(typ=MessageType.CAP_INVOKE, body={}), pair.now)
    pair.shuttle()
    replies = [e.inbound.envelope for e in of_type(pair.client_events, MessageReceived)]
    assert [r.reply_to for r in replies if r.typ == MessageType.CAP_RESULT] == [invoke.id]
    # The drain period ends in a close.
    pair.server.handle_timer(pair.now + 30_000)
    assert pair.server.state is ConnState.CLOSED


def test_a_half_close_drains_so_earlier_work_is_still_answered() -> None:
    pair = open_pair(server_cfg=ConnectionConfig(drain_on_half_close=True))
    invoke = pair.client.send(Outbound(typ=MessageType.CAP_INVOKE, body={"capability": "x"}), pair.now)
    pair.shuttle()
    pair.server.end_of_input(pair.now)
    assert pair.server.state is ConnState.DRAINING and pair.server.input_ended
    assert of_type(drain_events(pair.server), InputEnded) == [InputEnded()]
    # The reply still goes out; nothing new may.
    pair.server.send(Outbound(typ=MessageType.CAP_RESULT, body={"ok": True}, reply_to=invoke.id), pair.now)
    with pytest.raises(LocalProtocolError):
        pair.server.send(Outbound(typ=MessageType.CAP_INVOKE, body={}), pair.now)
    pair.client.receive_data(pair.server.data_to_send(), pair.now)
    replies = [e.inbound.envelope for e in drain_events(pair.client) if isinstance(e, MessageReceived)]
    assert [r.reply_to for r in replies] == [invoke.id]
    # No keepalive PING (it could not be answered), and the drain period still ends it.
    pair.server.handle_timer(pair.now + 29_999)
    assert pair.server.data_to_send() == b"" and pair.server.state is ConnState.DRAINING
    pair.server.handle_timer(pair.now + 30_000)
    assert pair.server.state is ConnState.CLOSED


def test_a_clean_eof_before_negotiation_or_mid_frame_is_a_close() -> None:
    half = ConnectionConfig(drain_on_half_close=True)
    early = make_conn(Role.SERVER, 2, half)
    early.start(T0)
    early.end_of_input(T0)
    assert early.state is ConnState.CLOSED and not early.input_ended
    plain = open_pair()  # an owner that did not ask for half-closes gets a close
    plain.server.end_of_input(plain.now)
    assert plain.server.state is ConnState.CLOSED and not plain.server.input_ended
    pair = open_pair(server_cfg=half)
    pair.server.receive_data(b"\x00\x00", pair.now)  # the start of a frame header
    pair.server.end_of_input(pair.now)
    (term,) = of_type(drain_events(pair.server), ConnectionTerminated)
    assert pair.server.state is ConnState.CLOSED and term.code == 1001


def test_goaway_payload_on_the_wire() -> None:
    pair = open_pair()
    pair.server.start_drain(T0, reason=7, message="maintenance")
    (frame,) = frames_of(pair.server.data_to_send())
    assert GoAway.from_payload(frame.payload) == GoAway(reason=7, message="maintenance", last_id=None)


def test_eof_terminates() -> None:
    pair = open_pair()
    pair.server.receive_eof()
    (term,) = drain_events(pair.server)
    assert isinstance(term, ConnectionTerminated) and term.code is None and term.by_peer


def test_data_is_coalesced_into_one_buffer() -> None:
    pair = open_pair()
    for i in range(5):
        pair.client.send(Outbound(typ=MessageType.MESSAGE, body={"i": i}), pair.now)
    data = pair.client.data_to_send()
    assert len(frames_of(data)) == 5 and pair.client.data_to_send() == b""


# --------------------------------------------------------------- raw mode


def test_raw_mode_without_hello_is_open_at_once() -> None:
    cfg = ConnectionConfig(framing=Framing.RAW)
    pair = open_pair(cfg, cfg, peer_did=identity(2).did)
    assert pair.client.state is pair.server.state is ConnState.OPEN
    env = pair.client.send(Outbound(typ=MessageType.MESSAGE, body={"t": 1}), pair.now)
    data = pair.client.data_to_send()
    assert data[:4] == (len(data) - 4).to_bytes(4, "big")  # bare length, no type byte
    pair.server.receive_data(data, pair.now)
    (ev,) = drain_events(pair.server)
    assert ev.inbound.envelope.id == env.id


def test_a_raw_client_that_says_nothing_is_closed_after_the_handshake_timeout() -> None:
    # Raw framing has neither a handshake nor keepalive to end a silent
    # socket; without this, a few of them would hold every connection slot.
    cfg = ConnectionConfig(framing=Framing.RAW)
    silent = make_conn(Role.SERVER, 2, cfg)
    silent.start(T0)
    assert silent.get_timer() == T0 + 10_000
    silent.handle_timer(T0 + 9_999)
    assert silent.state is ConnState.OPEN
    silent.handle_timer(T0 + 10_000)
    (term,) = of_type(drain_events(silent), ConnectionTerminated)
    assert silent.state is ConnState.CLOSED and term.code == 5003 and "nothing received" in term.reason
    assert silent.data_to_send() == b""  # raw framing: no transport ERROR frame
    talker = open_pair(cfg, cfg, peer_did=identity(2).did)  # once it has spoken, quiet is fine
    talker.client.send(Outbound(typ=MessageType.MESSAGE, body={"t": 1}), talker.now)
    talker.shuttle()
    assert talker.server.get_timer() is None
    talker.server.handle_timer(talker.now + 10**9)
    assert talker.server.state is ConnState.OPEN


def test_a_rejection_says_whether_the_signature_verified() -> None:
    # Only a verified refusal may end the call it answers (the daemon's
    # invoker): a forged reply with a bad signature is anybody's.
    import cbor2

    from ampcap.schema import load_schemas
    from ampcap.wire.identity import DidKeyResolver
    from ampcap.wire.receive import ReceivePipeline

    pair = open_pair()
    pair.client.pipeline = ReceivePipeline(DidKeyResolver(), schemas=load_schemas())  # bodies checked too
    good = amp_frame(2, MessageType.CAP_RESULT, {"status": "success"}, to=identity(1).did,
                     reply_to=bytes(16))  # signed, but no 'result': refused after the signature
    pair.client.receive_data(good, pair.now)
    (signed,) = of_type(drain_events(pair.client), MessageRejected)
    assert signed.error.code == 1001 and signed.authenticated
    decoded = cbor2.loads(good[5:])
    decoded["sig"] = bytes(64)
    forged = encode_frame(FrameType.AMP_MESSAGE, cbor2.dumps(decoded, canonical=True))
    pair.client.receive_data(forged, pair.now)
    (unsigned,) = of_type(drain_events(pair.client), MessageRejected)
    assert unsigned.error.code == 1002 and not unsigned.authenticated


def test_raw_mode_with_hello() -> None:
    cfg = ConnectionConfig(framing=Framing.RAW, raw_hello=True)
    pair = open_pair(cfg, cfg)
    assert pair.client.state is pair.server.state is ConnState.OPEN
    assert pair.client.peer_did == identity(2).did


def _raw_frame(seed: int, typ: int, body: Any, *, to: str) -> bytes:
    _, wire = seal(identity(seed), typ=typ, to=to, body=body, now_ms=T0, entropy=entropy_from(seed * 31), v=1)
    return encode_frame(FrameType.AMP_MESSAGE, wire, Framing.RAW)


def test_a_preconfigured_raw_server_answers_a_peers_hello_and_learns_its_did() -> None:
    # RFC 002 §3.3: without a HANDSHAKE the version may be preconfigured, but
    # a peer that still opens with HELLO must get its HELLO_ACK, not 1001.
    client_cfg = ConnectionConfig(framing=Framing.RAW, raw_hello=True)
    server_cfg = ConnectionConfig(framing=Framing.RAW)
    pair = open_pair(client_cfg, server_cfg)
    assert pair.client.state is pair.server.state is ConnState.OPEN
    assert pair.client.peer_did == identity(2).did and pair.server.peer_did == identity(1).did
    assert [e.peer_did for e in of_type(pair.server_events, Negotiated)] == [None, identity(1).did]
    assert of_type(pair.client_events + pair.server_events, MessageRejected) == []
    # From now on the connection is bound to that DID (RFC 002 §7.1)...
    pair.server.receive_data(_raw_frame(3, MessageType.MESSAGE, {"t": 1}, to=identity(2).did), pair.now)
    (rejected,) = of_type(drain_events(pair.server), MessageRejected)
    assert rejected.error.code == 3001 and pair.server.state is ConnState.CLOSED


def test_a_preconfigured_raw_server_answers_one_hello_only() -> None:
    server = make_conn(Role.SERVER, 2, ConnectionConfig(framing=Framing.RAW))
    server.start(T0)
    drain_events(server)
    server.receive_data(_raw_frame(1, MessageType.HELLO, {"versions": ["1.0"]}, to=identity(2).did), T0)
    assert decode_frames_raw(server.data_to_send())[0]["typ"] == MessageType.HELLO_ACK
    drain_events(server)
    server.receive_data(_raw_frame(1, MessageType.HELLO, {"versions": ["1.0"]}, to=identity(2).did), T0)
    (rejected,) = of_type(drain_events(server), MessageRejected)
    assert rejected.error.code == 1001 and server.state is ConnState.OPEN


def test_a_relay_registration_hello_gets_no_answer_on_a_preconfigured_raw_server() -> None:
    # The Rust example's clients open with HELLO {"versions": ["0.30.0"]}
    # addressed to their relay, and expect nothing back from it.
    server = make_conn(Role.SERVER, 2, ConnectionConfig(framing=Framing.RAW))
    server.start(T0)
    drain_events(server)
    server.receive_data(_raw_frame(1, MessageType.HELLO, {"versions": ["0.30.0"]},
                                   to="did:web:example.com:relay:main"), T0)
    assert server.data_to_send() == b"" and drain_events(server) == []
    assert server.state is ConnState.OPEN and server.peer_did is None and server.negotiated_version == "1.0"
    server.receive_data(_raw_frame(1, MessageType.MESSAGE, {"t": 1}, to=identity(2).did), T0)
    assert [type(e) for e in drain_events(server)] == [MessageReceived]
    # Addressed to the relay, a HELLO is a registration even when it offers 1.0.
    other = make_conn(Role.SERVER, 2, ConnectionConfig(framing=Framing.RAW))
    other.start(T0)
    drain_events(other)
    other.receive_data(_raw_frame(1, MessageType.HELLO, {"versions": ["1.0"]},
                                  to="did:web:example.com:relay:main"), T0)
    assert other.data_to_send() == b"" and drain_events(other) == [] and other.peer_did is None


def decode_frames_raw(data: bytes) -> list[dict[str, Any]]:
    import cbor2

    out = []
    decoder = FrameDecoder(MIB, Framing.RAW)
    for frame in decoder.feed(data):
        out.append(cbor2.loads(frame.payload))
    return out


# ------------------------------------------------------------- hypothesis


def _normal(events: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, MessageRejected):
            out.append(("rejected", e.error.code, e.error.message, e.message_id))
        elif isinstance(e, MessageReceived):
            out.append(("received", e.inbound.raw))
        else:
            out.append((type(e).__name__, repr(e)))
    return out


def _client_prefix() -> bytes:
    """A valid client opening: HANDSHAKE + HELLO, as a real client writes it."""
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    out = client.data_to_send()
    client.receive_data(encode_frame(FrameType.HANDSHAKE, HandshakeResponse(
        accepted=True, max_msg_size=MIB).to_payload()), T0)
    return out + client.data_to_send()


_PREFIX = _client_prefix()
_GOOD = amp_frame(1, MessageType.MESSAGE, {"text": "hi"}, to=identity(2).did)

_frame = st.builds(lambda t, p: len(p + b"x").to_bytes(4, "big") + bytes([t]) + p,
                   st.integers(0, 8), st.binary(max_size=40))
_chunk = st.one_of(st.binary(max_size=30), _frame, st.just(_GOOD), st.just(encode_frame(FrameType.PING, b"p")))
_stream = st.tuples(st.booleans(), st.lists(_chunk, max_size=6)).map(
    lambda t: (_PREFIX if t[0] else b"") + b"".join(t[1]))


def _feed(chunks: list[bytes]) -> list[Any]:
    server = make_conn(Role.SERVER, 2)
    server.start(T0)
    events: list[Any] = []
    written = FrameDecoder(64 << 20)
    for c in chunks:
        server.receive_data(c, T0)  # must never raise
        events += drain_events(server)
        written.feed(server.data_to_send())  # whatever it writes is well framed
    written.close()
    server.receive_eof()
    events += drain_events(server)
    server.handle_timer(T0 + 10**9)
    events += drain_events(server)
    assert server.state is ConnState.CLOSED
    assert isinstance(events[-1], ConnectionTerminated)
    assert sum(isinstance(e, ConnectionTerminated) for e in events) == 1
    for e in events:
        if isinstance(e, MessageRejected):
            assert isinstance(e.error, AmpError)
    return events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stream)
def test_random_bytes_never_raise_and_split_does_not_matter(data: bytes) -> None:
    whole = _feed([data])
    bytewise = _feed([data[i:i + 1] for i in range(len(data))])
    assert _normal(whole) == _normal(bytewise)


def test_prefix_alone_negotiates() -> None:
    events = _feed([_PREFIX, _GOOD])
    assert [type(e) for e in events] == [HandshakeCompleted, Negotiated, MessageReceived, ConnectionTerminated]


def test_hello_from_another_did_than_the_handshake_is_3001() -> None:
    server = server_after_handshake()
    server.receive_data(amp_frame(3, MessageType.HELLO, {"versions": ["1.0"]}, to=identity(2).did), T0)
    assert server.state is ConnState.CLOSED
    assert drain_events(server)[-1].code == 3001


def test_hello_ack_with_a_version_we_did_not_offer_is_1004() -> None:
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    client.receive_data(encode_frame(FrameType.HANDSHAKE, HandshakeResponse(
        accepted=True, max_msg_size=MIB).to_payload()), T0)
    client.receive_data(amp_frame(2, MessageType.HELLO_ACK, {"selected": "7.0"}, to=identity(1).did), T0)
    assert client.state is ConnState.CLOSED and client.hello_state is HelloState.FAILED
    assert drain_events(client)[-1].code == 1004


def test_amp_message_before_server_handshake_reply_is_fatal_for_the_client() -> None:
    client = make_conn(Role.CLIENT, 1)
    client.start(T0)
    client.receive_data(amp_frame(2, MessageType.HELLO_ACK, {"selected": "1.0"}, to=identity(1).did), T0)
    assert client.state is ConnState.CLOSED
    assert drain_events(client)[-1].code == 1001
