"""Bindings to implementations behind other protocols (ruling R17): MCP
servers, HTTP endpoints and gRPC services, and a capability's ordered set of
bindings.

Like :mod:`.local`, this module only *describes*: the manifest builds
these objects, the runners in :mod:`ampcap.bindings` run them at the edge. The
transformations that need no I/O live here too, so they are tested without
a server: field mappings (OSSA §9.1), the HTTP body template and URL
placeholders (filled in the parsed tree, so no param can change the
document's structure), ``${NAME}`` expansion from an environment the edge
passes in, and the error mappings.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec

from ...errors import AmpError
from .local import DEFAULT_COMMAND_TIMEOUT_MS, MAX_TIMEOUT_MS

__all__ = [
    "BINDING_KINDS",
    "DEFAULT_REMOTE_TIMEOUT_MS",
    "NotRun",
    "McpServer",
    "McpBinding",
    "HttpBinding",
    "GrpcBinding",
    "Fallback",
    "map_fields",
    "fill_template",
    "fill_url",
    "expand_env",
    "env_names",
]

# R17's default order: the first binding that can run is used.
BINDING_KINDS = ("mcp", "http", "grpc", "command", "python")
DEFAULT_REMOTE_TIMEOUT_MS = DEFAULT_COMMAND_TIMEOUT_MS
UNAVAILABLE = 5002
INTERNAL = 5001

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FIELD_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


class NotRun(AmpError):
    """A binding failed before its implementation could have run (a server
    that will not start or connect, a refused connection, a name that does
    not resolve): the only failure after which the next binding is tried
    (R17), since nothing can have run twice."""


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping if isinstance(mapping, MappingProxyType) else MappingProxyType(dict(mapping))


def _check_timeout(ms: int) -> None:
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 < ms <= MAX_TIMEOUT_MS:
        raise AmpError(4001, f"timeout_ms must be an integer in 1..{MAX_TIMEOUT_MS}")


class McpServer(msgspec.Struct, frozen=True, kw_only=True):
    """``[mcp_server.NAME]``: a command run over stdio, or a streamable HTTP
    URL. Hashable (tuples, not dicts): the edge keeps one session per
    distinct server."""

    name: str
    command: tuple[str, ...] = ()
    cwd: Path | None = None
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    # Values may hold ${NAME}: expanded from the daemon's environment when
    # connecting, never shown.
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise AmpError(4001, "an MCP server needs exactly one of 'command' (stdio) or 'url' (streamable HTTP)")

    def describe(self) -> str:
        return self.url if self.url is not None else "stdio: " + " ".join(self.command)


class McpBinding(msgspec.Struct, frozen=True, kw_only=True):
    """``[capability.binding.mcp]``: call ``tool`` on ``server``."""

    server: McpServer
    tool: str
    mapping: Mapping[str, str] = msgspec.field(default_factory=_empty)
    output_mapping: Mapping[str, str] = msgspec.field(default_factory=_empty)
    # A tool error's code (see docs/bindings.md) -> AMP error code.
    error_mapping: Mapping[str, int] = msgspec.field(default_factory=_empty)
    timeout_ms: int = DEFAULT_REMOTE_TIMEOUT_MS

    kind = "mcp"

    def __post_init__(self) -> None:
        _check_timeout(self.timeout_ms)
        for name in ("mapping", "output_mapping", "error_mapping"):
            msgspec.structs.force_setattr(self, name, _frozen(getattr(self, name)))

    def describe(self) -> str:
        return f"{self.server.name}/{self.tool} ({self.server.describe()})"


class HttpBinding(msgspec.Struct, frozen=True, kw_only=True):
    """``[capability.binding.http]``: one HTTP request per invoke."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    # The parsed JSON document with {field} placeholders, or None (no body).
    body_template: Any = None
    output_mapping: Mapping[str, str] = msgspec.field(default_factory=_empty)
    # HTTP status -> AMP error code (other non-2xx statuses: 5001).
    error_mapping: Mapping[int, int] = msgspec.field(default_factory=_empty)
    timeout_ms: int = DEFAULT_REMOTE_TIMEOUT_MS

    kind = "http"

    def __post_init__(self) -> None:
        _check_timeout(self.timeout_ms)
        for name in ("output_mapping", "error_mapping"):
            msgspec.structs.force_setattr(self, name, _frozen(getattr(self, name)))

    def describe(self) -> str:
        # The URL as written: ${NAME} stays unexpanded, so secrets never show.
        return f"{self.method} {self.url}"


class GrpcBinding(msgspec.Struct, frozen=True, kw_only=True):
    """``[capability.binding.grpc]``: a unary call whose message types come
    from the server's reflection service."""

    target: str  # host:port
    method: str  # package.Service/Method
    tls: bool = False
    ca_file: Path | None = None
    mapping: Mapping[str, str] = msgspec.field(default_factory=_empty)
    output_mapping: Mapping[str, str] = msgspec.field(default_factory=_empty)
    timeout_ms: int = DEFAULT_REMOTE_TIMEOUT_MS

    kind = "grpc"

    def __post_init__(self) -> None:
        _check_timeout(self.timeout_ms)
        for name in ("mapping", "output_mapping"):
            msgspec.structs.force_setattr(self, name, _frozen(getattr(self, name)))

    @property
    def service(self) -> str:
        return self.method.partition("/")[0]

    @property
    def path(self) -> str:
        """The HTTP/2 path gRPC calls: /package.Service/Method."""
        return "/" + self.method

    def describe(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{self.target}/{self.method}"


class Fallback(msgspec.Struct, frozen=True, kw_only=True):
    """Several bindings of one capability, in the order they are tried.
    The runner moves to the next one only on :class:`NotRun`."""

    bindings: tuple[Any, ...]

    kind = "fallback"
    # Each binding keeps its own timeout; the set has none of its own.
    timeout_ms = None

    def __post_init__(self) -> None:
        if len(self.bindings) < 2:
            raise AmpError(4001, "a fallback needs at least two bindings")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(b.kind for b in self.bindings)

    def describe(self) -> str:
        return " | ".join(f"{b.kind}: {b.describe()}" for b in self.bindings)


# ------------------------------------------------------------ transformations

def map_fields(value: Any, mapping: Mapping[str, str]) -> Any:
    """Rename the top-level fields ``mapping`` names (old -> new); the others
    pass through unchanged (OSSA §9.1). A value that is not an object, or an
    empty mapping, passes through as it is."""
    if not mapping or not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        out[mapping.get(key, key)] = item
    return out


def _lookup(params: Any, field: str) -> tuple[bool, Any]:
    """A param by name, or a nested one by a dotted path (``a.b``)."""
    value = params
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _as_text(value: Any) -> str:
    import json

    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def fill_template(template: Any, params: Any) -> Any:
    """The body template (already parsed JSON) with its placeholders filled
    from ``params``: a string that is exactly ``"{field}"`` becomes the
    param's value with its own JSON type; ``{field}`` inside a longer string
    becomes the value as text. Keys are never filled. Since the tree is
    built first and values are put into it, no param can add a key or close
    a string. A missing param is 4001 (the caller's mistake)."""
    if isinstance(template, str):
        whole = _FIELD_RE.fullmatch(template)
        if whole:
            found, value = _lookup(params, whole.group(1))
            if not found:
                raise AmpError(4001, f"the request has no param {whole.group(1)!r}, which the binding needs")
            return value

        def one(m: re.Match[str]) -> str:
            found, value = _lookup(params, m.group(1))
            if not found:
                raise AmpError(4001, f"the request has no param {m.group(1)!r}, which the binding needs")
            return _as_text(value)

        return _FIELD_RE.sub(one, template)
    if isinstance(template, list):
        return [fill_template(item, params) for item in template]
    if isinstance(template, dict):
        return {key: fill_template(item, params) for key, item in template.items()}
    return template


def fill_url(url: str, params: Any) -> str:
    """``{field}`` placeholders in a URL, each value percent-encoded whole
    (a ``/``, ``?`` or ``#`` in it cannot change the path or the query)."""

    def one(m: re.Match[str]) -> str:
        found, value = _lookup(params, m.group(1))
        if not found:
            raise AmpError(4001, f"the request has no param {m.group(1)!r}, which the binding needs")
        return urllib.parse.quote(_as_text(value), safe="")

    # ${NAME} is the environment's, not a param: leave it for expand_env.
    return re.sub(r"(?<!\$)" + _FIELD_RE.pattern, one, url)


def env_names(text: str) -> list[str]:
    """The ``${NAME}`` references in ``text``."""
    return _ENV_RE.findall(text)


def expand_env(text: str, environ: Mapping[str, str], *, what: str) -> str:
    """``${NAME}`` replaced from ``environ`` (the daemon's environment). An
    unset variable means the implementation cannot be reached as configured:
    :class:`NotRun` 5002, naming the variable, never a value."""

    def one(m: re.Match[str]) -> str:
        value = environ.get(m.group(1))
        if value is None:
            raise NotRun(UNAVAILABLE, f"{what} needs the environment variable {m.group(1)}, which is not set")
        return value

    return _ENV_RE.sub(one, text)
