"""The MCP SDK, imported lazily, and the conversions shared by ampcap's MCP
code (the bindings' client and the gateway).

The SDK (``mcp`` 2.x, on anyio, so it runs under trio) and pydantic cost
tens of milliseconds to import: only a command or a binding that speaks MCP
loads them, through :func:`require`. The protocol models are pydantic with
snake_case attributes (``structured_content``, ``is_error``,
``input_schema``); the JSON on the wire stays camelCase.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..decoders import json_loads
from ..errors import AmpError

__all__ = ["require", "tool_result_json", "tool_error", "ToolError", "ToolInfo", "tool_infos", "capability_name",
           "tools_manifest", "selected"]

INTERNAL = 5001
_CODE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.-]*)\s*[:\s]")
# The Python SDK's prefix for a ToolError a tool raised, before the tool's own text.
_SDK_PREFIX_RE = re.compile(r"^Error executing tool [^:]*: ")


def require() -> None:
    """Import the SDK, or fail with one line saying how to install it."""
    try:
        import mcp  # noqa: F401
        import mcp.client.session  # noqa: F401
    except ImportError as exc:
        raise AmpError(5002, f"MCP support needs the MCP SDK: pip install 'ampcap[mcp]' ({exc})") from None


def _text_parts(content: Iterable[Any]) -> str:
    return "".join(getattr(part, "text", "") for part in content if getattr(part, "type", None) == "text")


def tool_result_json(result: Any) -> Any:
    """A successful tool result as JSON (R17): its ``structuredContent`` when
    present; else its text parts, parsed, when they are a JSON object; else
    ``{"text": <the text parts joined>}``."""
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured
    text = _text_parts(getattr(result, "content", ()) or ())
    try:
        parsed = json_loads(text.encode("utf-8"))
    except (ValueError, UnicodeError):
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {"text": text}


@dataclass(frozen=True, slots=True)
class ToolError:
    """A tool's failure: the code ``error_mapping`` is matched against, and
    its text (the caller sees it, cut short)."""

    code: str | None
    text: str


def tool_error(result: Any) -> ToolError:
    """The code and text of an ``isError`` result. The code: a ``code`` (or
    ``error``) string field of its structured content, else the first word of
    its text when followed by ``:`` or a space (``NOT_FOUND: no such file``).
    The text: the tool's own, without the Python SDK's ``Error executing
    tool NAME:`` prefix."""
    text = _text_parts(getattr(result, "content", ()) or ())
    structured = getattr(result, "structured_content", None)
    code: str | None = None
    if isinstance(structured, dict):
        for key in ("code", "error"):
            if isinstance(structured.get(key), str):
                code = structured[key]
                break
        if not text:
            text = json.dumps(structured, ensure_ascii=False)[:500]
    # The SDK's prefix repeats what the caller already knows (which tool
    # failed): the tool's own text is what is kept and shown (said once).
    text = _SDK_PREFIX_RE.sub("", text, count=1)
    if code is None:
        m = _CODE_RE.match(text + " ")
        code = m.group(1) if m else None
    return ToolError(code, text)


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as ``tools/list`` describes it, in plain values."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] = field(default_factory=dict)  # MCP's hints, wire spelling (readOnlyHint, …)

    @property
    def read_only(self) -> bool:
        """The tool declares ``readOnlyHint: true``."""
        return self.annotations.get("readOnlyHint") is True

    @property
    def destructive(self) -> bool:
        """May change things irreversibly, as MCP's defaults read the hints:
        a tool not declared read-only is destructive unless it declares
        ``destructiveHint: false``."""
        return not self.read_only and self.annotations.get("destructiveHint", True) is not False


_HINTS = {"title": str, "readOnlyHint": bool, "destructiveHint": bool, "idempotentHint": bool, "openWorldHint": bool}


def _annotations(tool: Any) -> dict[str, Any]:
    raw = getattr(tool, "annotations", None)
    values = {} if raw is None else raw.model_dump(by_alias=True, exclude_none=True) \
        if hasattr(raw, "model_dump") else dict(raw)
    title = getattr(tool, "title", None)
    if isinstance(title, str) and "title" not in values:  # MCP also has a title beside the hints
        values["title"] = title
    return {k: v for k, v in values.items() if isinstance(v, _HINTS.get(k, type(None)))}


def tool_infos(tools: Iterable[Any]) -> list[ToolInfo]:
    """SDK ``Tool`` models as :class:`ToolInfo`."""
    out = []
    for tool in tools:
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
        output = tool.output_schema if isinstance(getattr(tool, "output_schema", None), dict) else None
        out.append(ToolInfo(name=tool.name, description=tool.description, input_schema=dict(schema),
                            output_schema=dict(output) if output is not None else None,
                            annotations=_annotations(tool)))
    return out


def selected(names: Iterable[str], include: Iterable[str] = (), exclude: Iterable[str] = ()) -> bool:
    """Whether a thing known by ``names`` (a tool's MCP name and its
    capability name, say) passes glob patterns (:mod:`fnmatch`, case
    sensitive): any ``include`` (none: all) and no ``exclude`` matches."""
    from fnmatch import fnmatchcase

    names, include, exclude = list(names), list(include), list(exclude)
    if include and not any(fnmatchcase(n, p) for n in names for p in include):
        return False
    return not any(fnmatchcase(n, p) for n in names for p in exclude)


_TOOL_SEGMENT_BAD = re.compile(r"[^A-Za-z0-9_-]")


def capability_name(server: str, tool: str) -> str:
    """``mcp.SERVER.TOOL``, the RFC 004 name of a server's tool: a dot in
    the tool name starts a segment; characters a name cannot hold become
    ``-``, and a segment that would not start with a letter or digit gets
    an ``x`` in front."""
    segments = []
    for part in [server, *tool.split(".")]:
        part = _TOOL_SEGMENT_BAD.sub("-", part)
        if not part or not part[0].isalnum():
            part = "x" + part
        segments.append(part)
    return "mcp." + ".".join(segments)


def tools_manifest(server: str, server_table: dict[str, Any], tools: Iterable[ToolInfo], *,
                   include: Iterable[str] = (), exclude: Iterable[str] = (), read_only: bool = False) -> dict[str, Any]:
    """A manifest (parsed-TOML shape) offering every tool of one MCP server:
    ``mcp.SERVER.TOOL`` at 1.0.0 with the alias ``mcp:SERVER/TOOL@1.0``
    (when the tool's name fits that URI), the tool's schemas (an output
    schema of ``{}``, anything, when it declares none) and its description
    as notes, its MCP annotations as ``annotations``. ``include`` and
    ``exclude`` are globs matched against the tool's name and the
    capability's; ``read_only`` keeps only tools declaring ``readOnlyHint``.
    ``caps import-mcp`` prints it as TOML; ``serve --mcp`` serves it as it is."""
    from ..caps.names import parse_ossa_uri

    capabilities = []
    seen: set[str] = set()
    for tool in tools:
        name = capability_name(server, tool.name)
        if not selected((tool.name, name), include, exclude) or (read_only and not tool.read_only):
            continue
        if name in seen:  # two tools that differ only in characters a name cannot hold
            continue
        seen.add(name)
        entry: dict[str, Any] = {"name": name, "version": "1.0.0"}
        alias = f"mcp:{server}/{tool.name}@1.0"
        try:
            if parse_ossa_uri(alias) is not None:
                entry["aliases"] = [alias]
        except AmpError:
            pass
        if tool.description:
            entry["notes"] = tool.description
        entry["input_schema"] = tool.input_schema
        entry["output_schema"] = tool.output_schema if tool.output_schema is not None else {}
        if tool.annotations:
            entry["annotations"] = dict(tool.annotations)
        entry["binding"] = {"mcp": {"server": server, "tool": tool.name}}
        capabilities.append(entry)
    return {"bundle_id": f"mcp.{server}", "mcp_server": {server: server_table}, "capability": capabilities}
