"""amp:// and amps:// endpoint URLs."""

from __future__ import annotations

import pytest

from ampcap.net.url import DEFAULT_PORT, AmpUrl, UrlError, parse_url


@pytest.mark.parametrize("text, expected", [
    ("amp://example.com:9000", AmpUrl("amp", "example.com", 9000)),
    ("amps://example.com", AmpUrl("amps", "example.com", DEFAULT_PORT)),
    ("AMPS://Example.COM:1/", AmpUrl("amps", "example.com", 1)),
    ("amp://127.0.0.1:7700", AmpUrl("amp", "127.0.0.1", 7700)),
    ("amp://[::1]:8000", AmpUrl("amp", "::1", 8000)),
    ("amps://[2001:db8::1]", AmpUrl("amps", "2001:db8::1", DEFAULT_PORT)),
])
def test_valid(text: str, expected: AmpUrl) -> None:
    assert parse_url(text) == expected


def test_round_trip_and_tls_flag() -> None:
    assert str(parse_url("amp://[::1]:8000")) == "amp://[::1]:8000"
    assert parse_url("amps://h").tls and not parse_url("amp://h").tls


@pytest.mark.parametrize("text, fragment", [
    ("", "empty"),
    ("example.com:7700", "no scheme"),
    ("http://example.com", "unsupported scheme"),
    ("amp://", "no host"),
    ("amp://host:0", "port"),
    ("amp://host:70000", "port"),
    ("amp://host:abc", "port"),
    ("amp://host:", "empty port"),
    ("amp://host/path", "no path"),
    ("amp://host?x=1", "no path"),
    ("amp://user@host", "user information"),
    ("amp://[::1", "not a valid URL"),
])
def test_invalid(text: str, fragment: str) -> None:
    with pytest.raises(UrlError) as info:
        parse_url(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)
