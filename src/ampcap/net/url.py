"""``amp://`` and ``amps://`` endpoint URLs (RFC 002 §4.1).

RFC 002 gives no default port, so ampcap picks one: 7700 for both schemes
(a URL without a port means 7700). ``amps`` means TLS 1.2+; plain ``amp`` is
for trusted development networks only. The URL names an endpoint and nothing
else: a path other than ``/``, a query, a fragment or user info is refused
rather than silently ignored. Listening addresses (``--listen``, the dump
tap's ``--upstream``) are bare ``HOST:PORT`` pairs, parsed here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["AmpUrl", "UrlError", "parse_url", "parse_hostport", "DEFAULT_PORT"]

DEFAULT_PORT = 7700
_SCHEMES = ("amp", "amps")


class UrlError(ValueError):
    """A URL that does not name an AMP endpoint (the message says why)."""


@dataclass(frozen=True, slots=True)
class AmpUrl:
    scheme: str  # "amp" or "amps"
    host: str  # a name or an IP address; IPv6 without brackets
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "amps"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_url(text: str) -> AmpUrl:
    """Parse ``amp://host[:port]`` / ``amps://host[:port]``; :class:`UrlError` otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise UrlError("empty URL; expected amp://host:port or amps://host:port")
    text = text.strip()
    if "://" not in text:
        raise UrlError(f"{text!r} has no scheme; expected amp://host:port or amps://host:port")
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise UrlError(f"{text!r} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise UrlError(f"unsupported scheme {parts.scheme!r} in {text!r}; use amp:// or amps://")
    if parts.username is not None or parts.password is not None:
        raise UrlError(f"{text!r}: user information is not allowed in an AMP endpoint URL")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UrlError(f"{text!r}: an AMP endpoint URL has no path, query or fragment")
    host = parts.hostname
    if not host:
        raise UrlError(f"{text!r} has no host")
    netloc = parts.netloc
    if ":" in host and not netloc.startswith("["):
        raise UrlError(f"{text!r}: an IPv6 address must be written in brackets, e.g. amp://[::1]:7700")
    try:
        port = parts.port
    except ValueError:
        raise UrlError(f"{text!r}: the port must be a number from 1 to 65535") from None
    if port is None:
        if netloc.endswith(":"):
            raise UrlError(f"{text!r}: empty port")
        port = DEFAULT_PORT
    if port == 0:
        raise UrlError(f"{text!r}: the port must be a number from 1 to 65535")
    return AmpUrl(scheme, host, port)


def parse_hostport(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``:PORT`` (127.0.0.1) as (host, port);
    ValueError otherwise. Port 0 is allowed: listen on any free port."""
    host, sep, port = text.rpartition(":")
    if "/" in host:  # amp://host:port, say: the address to bind is not a URL
        raise ValueError(f"expected HOST:PORT, not a URL (e.g. 127.0.0.1:7700), got {text!r}")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:7700, [::1]:7700 or :0), got {text!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)
