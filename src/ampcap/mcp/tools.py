"""AMP capabilities as MCP tools: the mapping of ruling R18, as plain functions.

Nothing here does I/O or imports the MCP SDK: the gateway
(:mod:`ampcap.mcp.gateway`) feeds descriptors in and turns what comes out
into the SDK's types. Tools are plain dicts in MCP's wire spelling
(``inputSchema``, ``outputSchema``), so they can be compared to decide
whether ``notifications/tools/list_changed`` is due.

Naming (R18, documented in docs/mcp-gateway.md):

- A tool is named after the capability. By default (``underscore=True``)
  every character outside ``[A-Za-z0-9_-]`` becomes ``_``, since the LLM
  tool APIs hosts hand tools to allow only those (``^[A-Za-z0-9_-]{1,64}$``);
  ``underscore=False`` keeps the dots MCP itself allows. The gateway maps a
  tool name back to its capability through its table, never by undoing this.
- Peers are taken in the order given, each one's capabilities by name. A
  tool name already taken by an earlier peer gets the suffix ``.peerN``
  (``_peerN`` with ``underscore``), N being the peer's position from 1.
- A name longer than 64 characters keeps its first 55 and ends with ``-``
  and 8 hex digits of the SHA-256 of the uncut name; a name still taken
  after all that (only a contrived set gets there) is its hash form too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..caps.descriptor import Descriptor
from ..caps.semver import Range
from ..dump.diag import to_json_value
from ..errors import AmpError
from ..wire.registry import error_info

__all__ = [
    "MAX_TOOL_NAME",
    "Choice",
    "assign_names",
    "choose",
    "error_text",
    "annotations_for",
    "offered",
    "input_schema_for",
    "output_schema_for",
    "result_content",
    "tool_name",
]

MAX_TOOL_NAME = 64
_HASH_DIGITS = 8
_NOT_PLAIN = re.compile(r"[^A-Za-z0-9_-]")
_MCP_CHARS = re.compile(r"[^A-Za-z0-9_.-]")  # what MCP tool names may hold at all


@dataclass(frozen=True, slots=True)
class Choice:
    """One tool to offer: which peer (its position) and which version."""

    peer: int
    descriptor: Descriptor


def _hashed(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_DIGITS]


def _cut(name: str) -> str:
    if len(name) <= MAX_TOOL_NAME:
        return name
    return f"{name[:MAX_TOOL_NAME - _HASH_DIGITS - 1]}-{_hashed(name)}"


def tool_name(capability: str, *, underscore: bool = False) -> str:
    """The tool name for ``capability`` before any clash is settled.

    A peer's capability name may hold any text; characters MCP does not
    allow in a tool name become ``_`` in every mode."""
    name = (_NOT_PLAIN if underscore else _MCP_CHARS).sub("_", capability) or "_"
    return _cut(name)


def assign_names(offers: Sequence[Iterable[str]], *, underscore: bool = False) -> dict[str, tuple[int, str]]:
    """Tool name → (peer position, capability name), for every capability
    name each peer offers (``offers[i]`` is peer i's). Deterministic: the
    same offers always get the same names, whatever order they came in."""
    taken: dict[str, tuple[int, str]] = {}
    sep = "_" if underscore else "."
    for position, names in enumerate(offers):
        for capability in sorted(set(names)):
            name = tool_name(capability, underscore=underscore)
            if name in taken:
                name = _cut(f"{tool_name(capability, underscore=underscore)}{sep}peer{position + 1}")
            if name in taken:  # only a contrived set of names gets here
                name = f"{name[:MAX_TOOL_NAME - _HASH_DIGITS - 1]}-{_hashed(f'{position}:{capability}')}"
            taken[name] = (position, capability)
    return taken


# The capabilities no MCP host should see as tools: ampcap's own plumbing
# (the schema artifact service every daemon offers, docs/mcp-gateway.md).
HIDDEN = ("org.ampcap.schema.*",)


def offered(name: str, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> bool:
    """Whether capability ``name`` becomes a tool: not ampcap's plumbing, any
    ``include`` glob (none: all) and no ``exclude`` glob matches."""
    from fnmatch import fnmatchcase

    if any(fnmatchcase(name, p) for p in HIDDEN):
        return False
    if include and not any(fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatchcase(name, p) for p in exclude)


_HINTS = {"title": str, "readOnlyHint": bool, "destructiveHint": bool, "idempotentHint": bool, "openWorldHint": bool}


def annotations_for(descriptor: Descriptor) -> dict[str, Any]:
    """MCP tool annotations from the descriptor's ``annotations`` extension
    (what ``caps import-mcp`` and ``serve --mcp`` keep of a tool's), with
    anything a peer sent that is not one of MCP's hints dropped."""
    raw = descriptor.extensions.get("annotations")
    if not isinstance(raw, Mapping):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and k in _HINTS and isinstance(v, _HINTS[k])}


def choose(descriptors: Iterable[Descriptor], ranges: Mapping[str, Range]) -> dict[str, Descriptor]:
    """Capability name → the version to offer: the newest the peer declares,
    or the newest inside ``ranges[name]`` when one is configured (a name
    with no version inside its range is left out)."""
    best: dict[str, Descriptor] = {}
    for d in descriptors:
        rng = ranges.get(d.name)
        if rng is not None and not rng.contains(d.version):
            continue
        held = best.get(d.name)
        if held is None or d.version > held.version:
            best[d.name] = d
    return best


def input_schema_for(schema: Any) -> dict[str, Any]:
    """MCP's ``inputSchema`` for a capability's params schema (``None``:
    not available locally). MCP arguments are always a JSON object, so a
    schema that says nothing of the type becomes an object schema, and one
    that is not an object schema (or is missing) a permissive object schema:
    the peer's own validation then answers."""
    if isinstance(schema, dict) and schema.get("type", "object") == "object":
        return {**schema, "type": "object"}
    return {"type": "object"}


def output_schema_for(schema: Any) -> dict[str, Any] | None:
    """MCP's ``outputSchema``: the result schema when it is an object schema
    (R18); otherwise none is declared and results travel wrapped (see
    :func:`result_content`)."""
    if isinstance(schema, dict) and schema.get("type") == "object":
        return dict(schema)
    return None


def result_content(result: Any) -> tuple[dict[str, Any], str]:
    """(``structuredContent``, text) for a success: the result's JSON view
    (CBOR byte strings as ``{"$bytes": hex}``, as ``ampcap invoke`` prints
    them). A result that is not an object (``null``, a number, a list) is
    ``{"result": value}`` as structured content, since that is always an
    object; the text is the value itself."""
    value = to_json_value(result)
    structured = value if isinstance(value, dict) else {"result": value}
    return structured, json.dumps(value, ensure_ascii=False, allow_nan=False)


def error_text(error: AmpError) -> str:
    """``CODE NAME: message``, the text of every failure's ``isError`` result."""
    return f"{error.code} {error_info(error.code).name}: {error.message}"
