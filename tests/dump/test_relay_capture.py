"""The dump reads the RFC 003 relay's HTTP bodies from a capture: webhook
deliveries (signature checked), relay-forward wrappers and their answers
(receipts decoded, refusals and bad receipts noted), commit reports."""

from __future__ import annotations

import os
import time

from ampcap.dump.httpws import HttpWsStream
from ampcap.dump.streams import Where
from ampcap.relay.federation import (ForwardAnswer, ForwardRequest, TransferReceipt, encode_commit_report,
                                     encode_forward, encode_forward_answer, sign_transfer_receipt)
from ampcap.relay.webhook import build_webhook
from ampcap.wire.envelope import seal
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType


def _request(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/cbor\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _response(body: bytes, status: int = 200) -> bytes:
    return (f"HTTP/1.1 {status} OK\r\nContent-Type: application/cbor\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


def _events(data: bytes, direction: str = "c2s") -> tuple[list[bytes], list[tuple[int, str]]]:
    events = HttpWsStream(Where(direction), 1 << 20).feed(data, None)
    frames = [e.frame.payload for e in events if e.frame is not None]
    notes = [(e.error.code, e.error.message) for e in events if e.error is not None]
    return frames, notes


def _message() -> tuple[Identity, bytes]:
    alice = Identity.generate(os.urandom)
    raw = seal(alice, typ=int(MessageType.MESSAGE), to=Identity.generate(os.urandom).did, body="hi",
               now_ms=time.time_ns() // 1_000_000, entropy=os.urandom)[1]
    return alice, raw


def test_webhook_delivery_message_and_signature() -> None:
    relay = Identity.generate(os.urandom)
    _, raw = _message()
    headers, body = build_webhook(relay, raw, time.time_ns() // 1_000_000)
    frames, notes = _events(_request("/amp/v1/webhook", body, headers))
    assert frames == [raw] and notes == []
    forged = dict(headers, **{"X-AMP-Signature": headers["X-AMP-Signature"][::-1]})
    frames, notes = _events(_request("/amp/v1/webhook", body, forged))
    assert frames == [raw] and notes and notes[0][0] == 3001 and "webhook" in notes[0][1]


def test_forward_wrapper_answer_and_commit_report() -> None:
    alice, raw = _message()
    up, down = Identity.generate(os.urandom), Identity.generate(os.urandom)
    wrapper = encode_forward(ForwardRequest(message=raw, from_did=alice.did, recipient_did="did:web:b.example",
                                            relay_path=(up.did,), hop_limit=3, upstream_relay=up.did,
                                            transfer_mode="single"))
    assert _events(_request("/amp/v1/relay/forward", wrapper)) == ([raw], [])
    receipt = sign_transfer_receipt(down, TransferReceipt(
        msg_id=b"\x00" * 16, from_did=alice.did, recipient_did="did:web:b.example", upstream_relay=up.did,
        downstream_relay=down.did, accepted_at=1, hop_limit_remaining=2, status="accepted"))
    assert _events(_response(encode_forward_answer(ForwardAnswer(accepted=True, receipt=receipt))), "s2c") == ([], [])
    frames, notes = _events(_response(encode_forward_answer(ForwardAnswer(accepted=True, receipt=b"junk")), ), "s2c")
    assert frames == [] and notes[0][0] == 3001
    refused = encode_forward_answer(ForwardAnswer(accepted=False, error_code=2003, error_message="relay loop"))
    assert _events(_response(refused), "s2c")[1] == [(2003, "relay-answer: refused: relay loop")]
    frames, notes = _events(_request("/amp/v1/relay/commit", encode_commit_report(b"junk")))
    assert frames == [] and notes[0][0] == 3001
