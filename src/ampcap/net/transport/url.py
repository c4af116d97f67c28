"""Endpoint URLs: ``amp(s)://`` (RFC 002 §4.1), ``http(s)://`` (§6) and
``ws(s)://`` (§5).

RFC 002 gives AMPS no default port, so ampcap picks one: 7700 for both
schemes (a URL without a port means 7700). HTTP and WebSocket URLs default to
80 and 443 as usual. ``amps``, ``https`` and ``wss`` mean TLS 1.2+; the plain
ones are for trusted development networks only. The URL names an endpoint and
nothing else: a path other than ``/`` (or, for HTTP and WebSocket, the
binding's own fixed path), a query, a fragment or user info is refused
rather than silently ignored. Several endpoints of one peer (a
comma-separated list) are ordered by RFC 002 §3.5: ``amps > wss > https``. Listening addresses (``--listen``, the dump
tap's ``--upstream``) are bare ``HOST:PORT`` pairs, parsed here too.

Both check the host the way the resolver will: a name with an empty label
(``a..b``) or a label over 63 characters is refused here, with its name,
because the resolver refuses it with a ``UnicodeError`` from its 'idna'
codec, which reads like a bug rather than a typo. An IPv6 address goes in
brackets in both forms; without them its colons would be taken for the port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["AmpUrl", "UrlError", "parse_url", "parse_endpoints", "by_priority", "parse_hostport", "format_hostport",
           "host_problem", "DEFAULT_PORT", "MESSAGES_PATH", "WS_PATH"]

DEFAULT_PORT = 7700
MESSAGES_PATH = "/amp/v1/messages"  # RFC 002 §6.1 (submit) and §6.2 (poll)
WS_PATH = "/amp/v1/ws"  # RFC 002 §5.1
_SCHEMES = ("amp", "amps", "ws", "wss", "http", "https")
_DEFAULT_PORTS = {"amp": DEFAULT_PORT, "amps": DEFAULT_PORT, "ws": 80, "wss": 443, "http": 80, "https": 443}
_TLS = frozenset({"amps", "wss", "https"})
# The binding class of each scheme, and RFC 002 §3.5's priority among them.
_BINDING = {"amp": "amps", "amps": "amps", "ws": "ws", "wss": "ws", "http": "http", "https": "http"}
_PRIORITY = {"amps": 0, "ws": 1, "http": 2}
_PATHS = {"amps": ("", "/"), "ws": ("", "/", WS_PATH), "http": ("", "/", MESSAGES_PATH)}
_USE = "amp://, amps://, https://, http://, wss:// or ws://"
_IPV6_HINT = "IPv6 addresses go in brackets"


class UrlError(ValueError):
    """A URL that does not name an AMP endpoint (the message says why)."""


@dataclass(frozen=True, slots=True)
class AmpUrl:
    scheme: str  # "amp", "amps", "http", "https", "ws" or "wss"
    host: str  # a name or an IP address; IPv6 without brackets
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme in _TLS

    @property
    def binding(self) -> str:
        """The RFC 002 binding: ``"amps"`` (TCP framing), ``"ws"`` or ``"http"``."""
        return _BINDING[self.scheme]

    def __str__(self) -> str:
        return f"{self.scheme}://{format_hostport(self.host, self.port)}"


def parse_url(text: str) -> AmpUrl:
    """Parse ``amp(s)://host[:port]``, ``http(s)://…`` or ``ws(s)://…``;
    :class:`UrlError` otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise UrlError(f"empty URL; expected amp://host:port or another AMP endpoint URL ({_USE})")
    text = text.strip()
    if "://" not in text:
        raise UrlError(f"{text!r} has no scheme; write it as amp://{text} or with another scheme ({_USE})")
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unclosed bracket, or brackets around something not IPv6
        raise UrlError(f"{text!r} is not a valid URL: {exc} ({_IPV6_HINT}: amp://[::1]:7700)") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise UrlError(f"unsupported scheme {parts.scheme!r} in {text!r}; use {_USE}")
    if parts.username is not None or parts.password is not None:
        raise UrlError(f"{text!r}: user information is not allowed in an AMP endpoint URL")
    if parts.path not in _PATHS[_BINDING[scheme]] or parts.query or parts.fragment:
        raise UrlError(f"{text!r}: an AMP endpoint URL has no path, query or fragment")
    host = parts.hostname
    netloc = parts.netloc
    if not host:
        if netloc.count(":") > 1:  # amp://::1:7700 - urlsplit finds no host in it
            raise UrlError(f"{text!r} has no host ({_IPV6_HINT}: amp://[::1]:7700)")
        raise UrlError(f"{text!r} has no host")
    if ":" in host and not netloc.startswith("["):
        raise UrlError(f"{text!r}: an IPv6 address must be written in brackets, e.g. amp://[::1]:7700")
    problem = host_problem(host)
    if problem is not None:
        raise UrlError(f"{text!r}: {problem}")
    try:
        port = parts.port
    except ValueError:
        raise UrlError(f"{text!r}: the port must be a number from 1 to 65535") from None
    if port is None:
        if netloc.endswith(":"):
            raise UrlError(f"{text!r}: empty port")
        port = _DEFAULT_PORTS[scheme]
    if port == 0:
        raise UrlError(f"{text!r}: the port must be a number from 1 to 65535")
    return AmpUrl(scheme, host, port)


def parse_endpoints(text: str) -> list[AmpUrl]:
    """One URL, or several endpoints of the same peer separated by commas
    (``amps://h:7700,https://h``), in the order to try them (:func:`by_priority`)."""
    urls = [parse_url(part) for part in text.split(",")] if "," in text else [parse_url(text)]
    return by_priority(urls)


def by_priority(urls: list[AmpUrl]) -> list[AmpUrl]:
    """RFC 002 §3.5: ``amps > wss > https``, the given order kept within a class."""
    return sorted(urls, key=lambda url: _PRIORITY[url.binding])


def parse_hostport(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``:PORT`` (127.0.0.1) as (host, port);
    :class:`UrlError` (a ValueError) otherwise. Port 0 is allowed: listen on
    any free port."""
    usage = f"expected HOST:PORT (e.g. 127.0.0.1:7700, [::1]:7700 or :0), got {text!r}"
    if text.startswith("["):
        inner, closed, rest = text[1:].partition("]")
        if not closed:
            raise UrlError(f"{text!r}: unclosed '[' ({_IPV6_HINT}: [::1]:7700)")
        if not _is_ipv6(inner):
            raise UrlError(f"{text!r}: [{inner}] is not an IPv6 address ({_IPV6_HINT}: [::1]:7700)")
        host, sep, port = inner, *rest.partition(":")[1:]
        if rest[:1] != ":":
            raise UrlError(usage)
    else:
        if "/" in text.rpartition(":")[0]:  # amp://host:port, say: the address to bind is not a URL
            raise UrlError(f"expected HOST:PORT, not a URL (e.g. 127.0.0.1:7700), got {text!r}")
        if text.count(":") > 1:  # ::1, ::1:7700, a:b:c:0: which colon starts the port?
            raise UrlError(f"{text!r}: expected HOST:PORT; {_IPV6_HINT}: [::1]:7700")
        host, sep, port = text.rpartition(":")
        if "[" in host or "]" in host:
            raise UrlError(f"{text!r}: stray bracket ({_IPV6_HINT}: [::1]:7700)")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise UrlError(usage)
    if not host:
        return "127.0.0.1", int(port)
    problem = host_problem(host)
    if problem is not None:
        raise UrlError(f"{text!r}: {problem}")
    return host, int(port)


def format_hostport(host: object, port: object) -> str:
    """``HOST:PORT`` as :func:`parse_hostport` reads it back: an IPv6
    address in brackets."""
    host = str(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)  # a zone (fe80::1%eth0) is allowed
    except ValueError:
        return False
    return True


_MAX_LABEL, _MAX_NAME = 63, 253  # RFC 1035 §2.3.4, in the ASCII (IDNA) form


def host_problem(host: str) -> str | None:
    """Why the resolver would refuse ``host``, in words that name it, or
    None. IP addresses pass; names must have labels of 1 to 63 characters
    (after IDNA encoding), 253 in all, with one trailing dot allowed."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if host.isascii():
        name = host
    else:
        # What the resolvers will do with it: the stdlib's IDNA 2003 codec
        # (trio's first, numeric-only lookup), then trio's IDNA 2008 encoding.
        from trio.lowlevel import encode_hostname  # only for non-ASCII names: trio is slow to import

        try:
            host.encode("idna")
            name = encode_hostname(host).decode("ascii")
        except UnicodeError as exc:
            return f"{host!r} is not a valid host name ({exc})"
    labels = (name[:-1] if name.endswith(".") and name != "." else name).split(".")
    if any(not label for label in labels):
        return f"{host!r} is not a valid host name: it has an empty label (two dots in a row, or a dot at the start)"
    if any(len(label) > _MAX_LABEL for label in labels):
        return f"{host!r} is not a valid host name: a label (the part between dots) is over {_MAX_LABEL} characters"
    if len(name) > _MAX_NAME + name.endswith("."):
        return f"{host!r} is not a valid host name: over {_MAX_NAME} characters"
    return None
