"""amp:// and amps:// endpoint URLs."""

from __future__ import annotations

import pytest

from ampcap.net.transport.url import DEFAULT_PORT, AmpUrl, UrlError, parse_hostport, parse_url


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
    ("ftp://example.com", "unsupported scheme"),
    ("https://example.com/other", "no path"),
    ("wss://example.com/amp/v1/messages", "no path"),
    ("amp://", "no host"),
    ("amp://host:0", "port"),
    ("amp://host:70000", "port"),
    ("amp://host:abc", "port"),
    ("amp://host:", "empty port"),
    ("amp://host/path", "no path"),
    ("amp://host?x=1", "no path"),
    ("amp://user@host", "user information"),
    ("amp://[::1", "not a valid URL"),
    # Hosts the resolver would refuse: these passed, then the dial raised
    # UnicodeError ('idna' codec) as a traceback.
    ("amp://a..b:7700", "'a..b' is not a valid host name: it has an empty label"),
    ("amp://.example:7700", "empty label"),
    (f"amp://{'a' * 64}.example:7700", "over 63 characters"),
    (f"amps://{'a' * 64}", "over 63 characters"),
    (f"amp://{'.'.join(['a' * 60] * 5)}:1", "over 253 characters"),
    ("amp://\u2603.example:1", "is not a valid host name"),  # IDNA 2008 (trio's encoder) refuses it
    ("amp://::1:7700", "IPv6 addresses go in brackets: amp://[::1]:7700"),
    ("amp://[zz]:7700", "IPv6 addresses go in brackets"),
])
def test_invalid(text: str, fragment: str) -> None:
    with pytest.raises(UrlError) as info:
        parse_url(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text", [
    "amp://a.b.example:1", f"amp://{'a' * 63}:1", "amp://localhost.:1", "amp://ex\u00e4mple.com:1",
    "amp://a_b:1", "amp://[fe80::1%lo]:1",
])
def test_hosts_the_resolver_takes_are_accepted(text: str) -> None:
    assert parse_url(text).port == 1


@pytest.mark.parametrize("text, expected", [
    (":0", ("127.0.0.1", 0)),
    ("[::1]:7700", ("::1", 7700)),
    ("[fe80::1%lo]:0", ("fe80::1%lo", 0)),
    ("localhost:1", ("localhost", 1)),
    ("10.0.0.1:80", ("10.0.0.1", 80)),
])
def test_hostport_valid(text: str, expected: tuple[str, int]) -> None:
    assert parse_hostport(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("::1", "IPv6 addresses go in brackets: [::1]:7700"),       # was host ':' port 1
    ("[::1", "unclosed '['"),                                    # was host ':' port 1
    ("[zz]:0", "[zz] is not an IPv6 address"),                   # bound nothing, exit 1
    ("[]:0", "[] is not an IPv6 address"),                       # silently bound 127.0.0.1
    ("a:b:c:0", "IPv6 addresses go in brackets"),
    ("x]:0", "stray bracket"),
    ("a..b:0", "'a..b' is not a valid host name"),
    (f"{'a' * 64}:0", "over 63 characters"),
    ("amp://h:1", "not a URL"),
    ("h:70000", "expected HOST:PORT"),
])
def test_hostport_invalid(text: str, fragment: str) -> None:
    with pytest.raises(UrlError) as info:
        parse_hostport(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text, scheme, port, binding, tls", [
    ("https://example.com", "https", 443, "http", True),
    ("http://example.com:8080/amp/v1/messages", "http", 8080, "http", False),
    ("wss://example.com/amp/v1/ws", "wss", 443, "ws", True),
    ("ws://[::1]:9", "ws", 9, "ws", False),
])
def test_http_and_websocket_urls(text: str, scheme: str, port: int, binding: str, tls: bool) -> None:
    url = parse_url(text)
    assert (url.scheme, url.port, url.binding, url.tls) == (scheme, port, binding, tls)


def test_endpoints_are_ordered_amps_then_wss_then_https() -> None:
    from ampcap.net.transport.url import parse_endpoints

    urls = parse_endpoints("https://a,ws://b,amp://c,wss://d,amps://e")
    assert [u.host for u in urls] == ["c", "e", "b", "d", "a"]  # same class: the given order


def test_a_url_without_scheme_names_every_scheme() -> None:
    """Issue 38 item 12: the hint listed only amp(s):// though http(s):// and ws(s):// work too."""
    with pytest.raises(UrlError) as info:
        parse_url("example.com:7700")
    message = str(info.value)
    assert "amp://example.com:7700" in message
    for scheme in ("amps://", "https://", "http://", "wss://", "ws://"):
        assert scheme in message
