"""Opaque, tamper-evident, expiring cursors (RFC 004 §6.5, ruling R7)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.caps.cursor import CURSOR_TTL_MS, Cursor, CursorCodec
from ampcap.errors import AmpError

KEY = b"cursor-key-cursor-key-cursor-key"
NOW = 1_763_800_000_000
CTX = b"\x11" * 16
AT = Cursor("org.x.a", "1.2.0", 7)


def refused(codec: CursorCodec, text: object, ctx: bytes = CTX, now: int = NOW) -> AmpError:
    with pytest.raises(AmpError) as info:
        codec.open(text, ctx, now)  # type: ignore[arg-type]
    assert info.value.code == 4001
    return info.value


def test_round_trip_and_opacity() -> None:
    codec = CursorCodec(KEY)
    text = codec.mint(AT, CTX, NOW)
    assert codec.open(text, CTX, NOW) == AT
    assert codec.open(text, CTX, NOW + CURSOR_TTL_MS) == AT  # valid up to its expiry
    assert text.isascii() and "=" not in text and len(text) < 128  # URL-safe, compact
    # Same inputs, same cursor (deterministic); any other input, another one.
    assert codec.mint(AT, CTX, NOW) == text
    assert codec.mint(Cursor("org.x.a", "1.2.0", 8), CTX, NOW) != text


def test_expired_tampered_foreign_or_rebound_cursors_are_4001() -> None:
    codec = CursorCodec(KEY, ttl_ms=60_000)
    text = codec.mint(AT, CTX, NOW)
    refused(codec, text, now=NOW + 60_001)  # expired
    assert "filter" in refused(codec, text, ctx=b"\x22" * 16).message  # another filter/order
    refused(CursorCodec(b"another-key-another-key-another!"), text)  # another daemon
    raw = bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    for i in range(len(raw)):  # every single-byte change is caught by the MAC
        changed = bytearray(raw)
        changed[i] ^= 0x01
        refused(codec, base64.urlsafe_b64encode(bytes(changed)).rstrip(b"=").decode())
    for junk in ("", "!!!", "A", "AAAA", "x" * 600, None, 12, text + "A"):
        refused(codec, junk)


def test_payload_from_the_mac_holder_must_still_be_well_typed() -> None:
    # Forged with the right key (say a future format): fields of the wrong
    # type are refused, never trusted.
    import hashlib
    import hmac

    from ampcap.wire.cbor import dumps

    payload = dumps(["org.x.a", 5, 7, NOW + 1000, CTX])
    mac = hmac.new(KEY, payload, hashlib.sha256).digest()[:16]
    text = base64.urlsafe_b64encode(payload + mac).rstrip(b"=").decode()
    refused(CursorCodec(KEY), text)


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError):
        CursorCodec(b"short")


@settings(max_examples=100, deadline=None)
@given(name=st.text(min_size=1, max_size=40), version=st.text(min_size=1, max_size=20),
       generation=st.integers(0, 2**40), now=st.integers(0, 2**50))
def test_any_position_round_trips(name: str, version: str, generation: int, now: int) -> None:
    codec = CursorCodec(KEY)
    at = Cursor(name, version, generation)
    assert codec.open(codec.mint(at, CTX, now), CTX, now) == at
