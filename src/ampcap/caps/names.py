"""Capability names, ids, OSSA/MCP URIs and aliases (RFC 004 §4.1, R12).

* A name is reverse-domain and case-sensitive (``org.example.tool``); an id
  is ``name:version`` with a full SemVer 2.0.0 version.
* The source documents name capabilities with URIs instead:
  ``ossa:<domain>/<name>@M.m`` and ``mcp:<server>/<tool>@M.m``. They map to
  the RFC 004 name ``ossa.<domain>.<name>`` (``mcp.<server>.<tool>``) at
  version ``M.m.0``, and OSSA's compatibility rule (same major, provider
  minor at least the requested one) becomes the ``range`` policy
  ``>=M.m.0 <M+1.0.0`` (spec map, "Capability naming").
* Aliases (legacy ``type`` names, names kept after a rename, OSSA URIs a
  capability is also known by) resolve to the canonical name. Using one logs
  a deprecation warning, once per alias, and replies always carry the
  canonical name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

import msgspec

from ..display import quoted
from ..errors import AmpError
from .semver import Range, Version

__all__ = ["AliasTable", "OssaRef", "is_capability_name", "parse_capability_id", "parse_ossa_uri"]

log = logging.getLogger("ampcap.caps")

BAD_REQUEST = 4001
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9][A-Za-z0-9_-]*)+")
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_-]*"
# MAJOR.MINOR of at most 20 digits each, as in caps.semver (int() refuses
# text over 4,300 digits, and a peer's URI must get 4001, not an exception).
_URI_RE = re.compile(rf"(ossa|mcp):({_SEGMENT}(?:\.{_SEGMENT})*)/({_SEGMENT})"
                     r"@(0|[1-9][0-9]{0,19})\.(0|[1-9][0-9]{0,19})")


URI_SCHEMES = ("ossa:", "mcp:")  # capability URIs that serve as aliases


def is_full_id(text: str) -> bool:
    """Does ``text`` carry its version (``name:version``), rather than name
    a capability alone? A colon says so, except in an ``ossa:``/``mcp:`` URI
    alias, whose colon is its own."""
    return ":" in text and not text.startswith(URI_SCHEMES)


def is_capability_name(text: str) -> bool:
    """Reverse-domain: at least two dot-separated segments of letters,
    digits, ``_`` and ``-``, each starting with a letter or digit."""
    return isinstance(text, str) and _NAME_RE.fullmatch(text) is not None


def parse_capability_id(text: str) -> tuple[str, Version]:
    """``name:version`` → (name, Version); 4001 when malformed."""
    name, sep, version = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not sep or not is_capability_name(name):
        raise AmpError(BAD_REQUEST, f"{quoted(text)} is not a capability id (reverse-domain name ':' version)")
    return name, Version.parse(version)


class OssaRef(msgspec.Struct, frozen=True):
    """An ``ossa:`` or ``mcp:`` capability URI, and what it maps to."""

    scheme: str  # "ossa" | "mcp"
    domain: str  # OSSA domain, or MCP server
    local: str  # OSSA name, or MCP tool
    major: int
    minor: int

    @property
    def uri(self) -> str:
        return f"{self.scheme}:{self.domain}/{self.local}@{self.major}.{self.minor}"

    @property
    def name(self) -> str:
        """The RFC 004 name: ``ossa.security.scan_vulnerabilities``."""
        return f"{self.scheme}.{self.domain}.{self.local}"

    @property
    def version(self) -> Version:
        return Version(self.major, self.minor, 0)

    @property
    def compatible(self) -> Range:
        """OSSA's rule as a §4.4 range: same major, minor ≥ the requested one."""
        return Range.parse(f">={self.major}.{self.minor}.0 <{self.major + 1}.0.0")

    @property
    def capability_id(self) -> str:
        return f"{self.name}:{self.version}"


def parse_ossa_uri(text: str) -> OssaRef | None:
    """The parsed URI, or None when ``text`` is not an ``ossa:``/``mcp:`` URI
    at all; 4001 when it looks like one but is malformed."""
    if not isinstance(text, str) or not text.startswith(URI_SCHEMES):
        return None
    m = _URI_RE.fullmatch(text)
    if m is None:
        raise AmpError(BAD_REQUEST, f"{quoted(text)} is not a valid capability URI "
                                    "(expected ossa:<domain>/<name>@MAJOR.MINOR or mcp:<server>/<tool>@MAJOR.MINOR)")
    scheme, domain, local, major, minor = m.groups()
    return OssaRef(scheme, domain, local, int(major), int(minor))


class AliasTable:
    """alias → canonical name. A canonical name is never an alias of another."""

    def __init__(self, canonical: Iterable[str] = (), aliases: Mapping[str, str] | None = None) -> None:
        self._canonical: set[str] = set(canonical)
        self._aliases: dict[str, str] = {}
        self._warned: set[str] = set()
        for alias, name in (aliases or {}).items():
            self.add_alias(alias, name)

    def check_name(self, name: str) -> None:
        """4001 unless ``name`` may become a canonical name."""
        if name in self._aliases:
            raise AmpError(BAD_REQUEST, f"{name!r} is already an alias of {self._aliases[name]!r}")

    def check_alias(self, alias: str, name: str) -> None:
        """4001 unless ``alias`` may point to ``name``."""
        if alias in self._canonical or alias == name:
            raise AmpError(BAD_REQUEST, f"alias {alias!r} is itself a capability name")
        known = self._aliases.get(alias)
        if known is not None and known != name:
            raise AmpError(BAD_REQUEST, f"alias {alias!r} already points to {known!r}")

    def add_name(self, name: str) -> None:
        self.check_name(name)
        self._canonical.add(name)

    def add_alias(self, alias: str, name: str) -> None:
        self.check_alias(alias, name)
        self._aliases[alias] = name

    def is_alias(self, name: str) -> bool:
        return name in self._aliases

    def aliases_of(self, name: str) -> list[str]:
        return sorted(a for a, n in self._aliases.items() if n == name)

    def resolve(self, name: str) -> str:
        """The canonical name for ``name`` (itself when unknown: the caller
        then answers 4002). Resolving through an alias logs a deprecation
        warning the first time each alias is used (an OSSA/MCP URI alias: one
        INFO line, since it is no legacy name)."""
        if name in self._canonical:
            return name
        canonical = self._aliases.get(name)
        if canonical is None:
            # An OSSA/MCP URI nobody declared as an alias still names its
            # RFC 004 counterpart (ossa:d/n@M.m -> ossa.d.n).
            try:
                ref = parse_ossa_uri(name)
            except AmpError:
                return name
            return ref.name if ref is not None and ref.name in self._canonical else name
        if name not in self._warned:
            self._warned.add(name)
            if name.startswith(URI_SCHEMES):
                # An OSSA/MCP URI is how that ecosystem names the capability,
                # not a name kept for old callers: nothing to deprecate.
                log.info("capability URI %r resolves to %r", name, canonical)
            else:
                log.warning("capability alias %r is deprecated: use %r", name, canonical)
        return canonical
