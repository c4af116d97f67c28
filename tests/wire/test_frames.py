"""RFC 002 §4.2–§4.3 framing: vectors A.1/A.2/A.5, splits, errors, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.errors import AmpError
from ampcap.wire.cbor import loads
from ampcap.wire.frames import (
    Frame,
    FrameDecoder,
    FrameType,
    Framing,
    FramingError,
    encode_frame,
    other_protocol,
)

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "rfc002" / "frames.json").read_text())
MIB = 1 << 20


def decode_all(chunks: list[bytes], *, max_size: int = MIB, framing: Framing = Framing.RFC002
               ) -> tuple[list[Frame], AmpError | None]:
    """Feed every chunk, then close; return the frames and the first error."""
    dec = FrameDecoder(max_size, framing)
    frames: list[Frame] = []
    try:
        for chunk in chunks:
            frames += dec.feed(chunk)
        dec.close()
    except FramingError as exc:
        frames += exc.frames
        return frames, exc
    return frames, None


def bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def test_a1_positive() -> None:
    vec = VECTORS["A.1"]
    frames, err = decode_all([bytes.fromhex(vec["frame_hex"])])
    assert err is None
    assert frames == [Frame(FrameType.AMP_MESSAGE, bytes.fromhex(vec["payload_hex"]))]
    assert encode_frame(FrameType.AMP_MESSAGE, bytes.fromhex("a1617801")).hex() == vec["frame_hex"]


@pytest.mark.parametrize("split", [False, True], ids=["whole", "byte-at-a-time"])
def test_a2_declared_length_mismatch(split: bool) -> None:
    # On a stream, "length 4" frames 01 a1 61 78 and leaves one byte (01) that
    # can only be the start of a header that never completes: the stream is
    # rejected at EOF, and the frame that was cut short is not valid CBOR.
    data = bytes.fromhex(VECTORS["A.2"]["frame_hex"])
    frames, err = decode_all(bytewise(data) if split else [data])
    assert err is not None and err.code == 1001
    assert "header" in err.message and "1 of 5" in err.message
    assert frames == [Frame(FrameType.AMP_MESSAGE, bytes.fromhex("a16178"))]
    with pytest.raises(AmpError) as info:
        loads(frames[0].payload)
    assert info.value.code == 1001


def test_a2_as_only_bytes_of_a_connection_nothing_valid_is_delivered() -> None:
    # What a receiver acts on: zero well-formed AMP messages come out.
    data = bytes.fromhex(VECTORS["A.2"]["frame_hex"])
    frames, err = decode_all([data])
    good = []
    for f in frames:
        try:
            good.append(loads(f.payload))
        except AmpError:
            pass
    assert good == [] and err is not None


def test_truncated_payload_reported_at_close() -> None:
    data = encode_frame(FrameType.AMP_MESSAGE, b"\xa1\x61\x78\x01")[:-1]
    frames, err = decode_all([data])
    assert frames == [] and err is not None and err.code == 1001
    assert "declares 5 bytes, only 4 arrived" in err.message


def test_a5_oversize_rejected_from_header_alone() -> None:
    vec = VECTORS["A.5"]
    dec = FrameDecoder(vec["effective_max"])
    header = (vec["payload_size"] + 1).to_bytes(4, "big") + b"\x01"
    with pytest.raises(FramingError) as info:
        dec.feed(header[:4])  # the length alone is enough to refuse
    assert info.value.code == vec["code"]
    assert str(vec["payload_size"]) in info.value.message and str(vec["effective_max"]) in info.value.message
    assert dec.buffered == 0
    # Dead afterwards: the same error again, whatever comes next.
    with pytest.raises(FramingError) as again:
        dec.feed(b"\x00" * 10)
    assert again.value.message == info.value.message
    with pytest.raises(FramingError):
        dec.close()


def test_a5_whole_oversize_frame_is_not_kept() -> None:
    dec = FrameDecoder(MIB)
    with pytest.raises(FramingError):
        dec.feed(encode_frame(FrameType.AMP_MESSAGE, b"\x00" * (MIB + 1)))
    assert dec.buffered == 0


def test_exactly_max_payload_is_accepted() -> None:
    payload = b"\x07" * MIB
    frames, err = decode_all([encode_frame(FrameType.AMP_MESSAGE, payload)])
    assert err is None and frames[0].payload == payload


def test_zero_length_and_unknown_type() -> None:
    _, err = decode_all([b"\x00\x00\x00\x00"])
    assert err is not None and "length 0" in err.message
    _, err = decode_all([b"\x00\x00\x00\x01\x07"])
    assert err is not None and "unknown frame type 0x07" in err.message


@pytest.mark.parametrize("first_bytes, protocol", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "HTTP"),  # an HTTP server or proxy answered
    (b"HTTP", "HTTP"),  # only the four header bytes have arrived
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP"),  # an HTTP client at our port
    (b"\x15\x03\x03\x00\x02\x02\x32", "TLS"),  # a TLS alert: amp:// against an amps:// port
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "TLS"),  # a ClientHello at a plain port
    (b"SSH-2.0-OpenSSH_9.2\r\n", "SSH"),
])
@pytest.mark.parametrize("framing", [Framing.RFC002, Framing.RAW])
def test_another_protocols_first_bytes_are_named(first_bytes: bytes, protocol: str, framing: Framing) -> None:
    _, err = decode_all([first_bytes], framing=framing)
    assert err is not None and err.offset == 0
    assert err.message.endswith(f"(the peer seems to speak {protocol}, not AMP)")


def test_only_the_first_bytes_of_a_stream_are_taken_for_another_protocol() -> None:
    good = encode_frame(FrameType.PING, b"hi")
    _, err = decode_all([good + b"HTTP/1.1 200 OK\r\n"])  # later garbage is just a bad frame
    assert err is not None and err.offset == len(good) and "seems to speak" not in err.message
    _, err = decode_all([b"\x7f\xff\xff\xff\x01"])  # an oversized AMP frame is not another protocol
    assert err is not None and "seems to speak" not in err.message
    assert other_protocol(b"\x00\x00\x01\x00\x01") is None and other_protocol(b"") is None


def test_frames_before_a_fault_are_kept() -> None:
    good = encode_frame(FrameType.PING, b"hi")
    frames, err = decode_all([good + b"\x00\x00\x00\x01\x09"])
    assert frames == [Frame(FrameType.PING, b"hi")]
    assert err is not None and err.offset == len(good)


def test_every_frame_type_round_trips() -> None:
    stream = b"".join(encode_frame(t, bytes([t]) * t) for t in FrameType)
    frames, err = decode_all([stream])
    assert err is None
    assert [(f.type, f.payload) for f in frames] == [(t, bytes([t]) * t) for t in FrameType]


def test_raw_framing() -> None:
    stream = encode_frame(1, b"abc", Framing.RAW) + encode_frame(1, b"", Framing.RAW)
    assert stream == b"\x00\x00\x00\x03abc\x00\x00\x00\x00"
    frames, err = decode_all(bytewise(stream), framing=Framing.RAW)
    assert err is None
    assert frames == [Frame(FrameType.AMP_MESSAGE, b"abc"), Frame(FrameType.AMP_MESSAGE, b"")]
    with pytest.raises(ValueError):
        encode_frame(FrameType.PING, b"", Framing.RAW)
    _, err = decode_all([(MIB + 1).to_bytes(4, "big")], framing=Framing.RAW)
    assert err is not None


def test_set_max_size_applies_to_pending_frame() -> None:
    dec = FrameDecoder(16 * MIB)
    dec.feed((2 * MIB + 1).to_bytes(4, "big") + b"\x01")
    dec.set_max_size(MIB)
    with pytest.raises(FramingError):
        dec.feed(b"\x00")


def test_memoryview_and_bytearray_input() -> None:
    data = encode_frame(FrameType.PONG, b"xyz") * 2
    dec = FrameDecoder()
    assert len(dec.feed(memoryview(bytearray(data))[:5])) == 0
    assert len(dec.feed(bytearray(data[5:]))) == 2


def test_many_frames_in_one_feed_is_linear() -> None:
    # 200k frames in one chunk must not copy the buffer per frame.
    import time

    one = encode_frame(FrameType.AMP_MESSAGE, b"\xa1\x61\x78\x01")
    data = one * 200_000
    t0 = time.perf_counter()
    frames = FrameDecoder().feed(data)
    elapsed = time.perf_counter() - t0
    assert len(frames) == 200_000
    assert elapsed < 2.0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(list(Framing)))
def test_fuzz_whole_equals_bytewise(data: bytes, framing: Framing) -> None:
    whole = decode_all([data], max_size=64, framing=framing)
    split = decode_all(bytewise(data), max_size=64, framing=framing)
    assert whole[0] == split[0]
    assert (whole[1] is None) == (split[1] is None)
    if whole[1] is not None:
        assert split[1] is not None
        assert (whole[1].code, whole[1].message) == (split[1].code, split[1].message)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(FrameType)), st.binary(max_size=80)), max_size=8),
       st.data())
def test_fuzz_round_trip_any_split(items: list[tuple[FrameType, bytes]], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(t, p) for t, p in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    frames, err = decode_all(chunks)
    assert err is None
    assert [(f.type, f.payload) for f in frames] == items
