"""RFC 002 §4.4–§4.5 control payloads."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampcap.errors import AmpError
from ampcap.wire.frames import FrameType
from ampcap.wire.transport import (
    GoAway,
    HandshakeRequest,
    HandshakeResponse,
    TransportError,
    decode_control_payload,
    decode_handshake,
    effective_max,
)

MIB = 1 << 20


def test_handshake_request_round_trip_and_determinism() -> None:
    req = HandshakeRequest(max_msg_size=16 * MIB, did="did:key:z6Mk", token=b"\x01\x02",
                           extensions=("x-a", "x-b"))
    payload = req.to_payload()
    # Keys sorted shortest first (deterministic CBOR, all text keys).
    assert list(cbor2.loads(payload)) == ["did", "token", "version", "extensions", "max_msg_size"]
    assert HandshakeRequest.from_payload(payload) == req
    assert decode_handshake(payload) == req


def test_handshake_response_round_trip() -> None:
    resp = HandshakeResponse(accepted=False, max_msg_size=MIB, error="busy")
    assert HandshakeResponse.from_payload(resp.to_payload()) == resp
    assert decode_handshake(resp.to_payload()) == resp
    assert decode_control_payload(FrameType.HANDSHAKE, resp.to_payload()) == resp


def test_goaway_and_error_round_trip() -> None:
    g = GoAway(reason=1, message="draining", last_id=bytes(16))
    assert GoAway.from_payload(g.to_payload()) == g
    assert decode_control_payload(FrameType.GOAWAY, g.to_payload()) == g
    e = TransportError(code=1001, message="bad frame", msg_id=b"\x01" * 16)
    assert TransportError.from_payload(e.to_payload()) == e
    assert decode_control_payload(FrameType.ERROR, e.to_payload()) == e
    assert decode_control_payload(FrameType.PING, b"\x00") == b"\x00"


@pytest.mark.parametrize(
    ("cls", "value", "path"),
    [
        (HandshakeRequest, {"version": 1}, "handshake.max_msg_size"),
        (HandshakeRequest, {"version": -1, "max_msg_size": 1}, "handshake.version"),
        (HandshakeRequest, {"version": True, "max_msg_size": 1}, "handshake.version"),
        (HandshakeRequest, {"version": 1, "max_msg_size": 1, "token": "text"}, "handshake.token"),
        (HandshakeRequest, {"version": 1, "max_msg_size": 1, "extensions": [1]}, "handshake.extensions"),
        (HandshakeRequest, {"version": 1, "max_msg_size": 1, "bogus": 1}, "handshake.bogus"),
        (HandshakeResponse, {"version": 1, "accepted": 1, "max_msg_size": 1}, "handshake.accepted"),
        (GoAway, {"reason": 1, "last_id": b"short"}, "goaway.last_id"),
        (GoAway, {"message": "x"}, "goaway.reason"),
        (TransportError, {"code": 1, "message": 5}, "error.message"),
        (TransportError, [1, 2], "error"),
    ],
)
def test_strict_decoding(cls: type, value: object, path: str) -> None:
    with pytest.raises(AmpError) as info:
        cls.from_payload(cbor2.dumps(value))
    assert info.value.code == 1001 and info.value.path == path


def test_garbage_payloads() -> None:
    for data in (b"", b"\xff", b"\xa1", b"\xa0\x00"):
        with pytest.raises(AmpError):
            GoAway.from_payload(data)


def test_effective_max() -> None:
    assert effective_max(16 * MIB, 64 * MIB) == 16 * MIB
    assert effective_max(1000, 64 * MIB) == MIB  # never under 1 MiB (R4)


@given(st.binary(max_size=64))
def test_fuzz_only_amperror(data: bytes) -> None:
    for cls in (HandshakeRequest, HandshakeResponse, GoAway, TransportError):
        try:
            cls.from_payload(data)
        except AmpError as exc:
            assert exc.code == 1001
