"""The §6.3 webhook delivery: what the relay sends verifies, and what the
receiver must refuse is refused with the right code."""

from __future__ import annotations

import pytest

from ampcap.errors import AmpError
from ampcap.relay.webhook import build_webhook, read_webhook
from ampcap.wire.cbor import dumps
from ampcap.wire.identity import DidKeyResolver
from relay_helpers import NOW, ident, message

RELAY, OTHER, ALICE, BOB = ident(100), ident(5), ident(1), ident(2)


def _read(headers, body, now=NOW, trusted=(RELAY.did,)):
    return read_webhook(headers, body, resolver=DidKeyResolver(), trusted=trusted, now_ms=now)


def test_a_delivery_round_trips_with_the_raw_bytes() -> None:
    _, raw = message(ALICE, BOB.did)
    headers, body = build_webhook(RELAY, raw, NOW)
    got = _read(headers, body)
    assert got.message == raw and got.relay == RELAY.did and got.sent_at == NOW


@pytest.mark.parametrize(("change", "code"), [
    (lambda h, b: (h, b[:-1] + bytes([b[-1] ^ 1])), 3001),  # body changed after signing
    (lambda h, b: ({**h, "X-AMP-Timestamp": str(NOW // 1000 - 1)}, b), 3001),  # timestamp not the signed one
    (lambda h, b: ({**h, "X-AMP-Relay": OTHER.did}, b), 3001),  # header and wrapper disagree
    (lambda h, b: ({**h, "X-AMP-Signature": "***"}, b), 3001),
    (lambda h, b: ({k: v for k, v in h.items() if k != "X-AMP-Signature"}, b), 3001),
    (lambda h, b: (h, dumps({"message": b"x", "relay": RELAY.did})), 1001),
    (lambda h, b: ({**h, "X-AMP-Timestamp": "soon"}, b), 1001),
])
def test_bad_deliveries_are_refused(change, code) -> None:
    _, raw = message(ALICE, BOB.did)
    headers, body = change(*build_webhook(RELAY, raw, NOW))
    with pytest.raises(AmpError) as info:
        _read(headers, body)
    assert info.value.code == code


def test_stale_and_untrusted() -> None:
    _, raw = message(ALICE, BOB.did)
    headers, body = build_webhook(RELAY, raw, NOW)
    with pytest.raises(AmpError) as info:
        _read(headers, body, now=NOW + 301_000)
    assert info.value.code == 1003
    with pytest.raises(AmpError) as info:
        _read(headers, body, trusted=(OTHER.did,))
    assert info.value.code == 3001
