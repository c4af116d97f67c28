"""The manifest tables of the bindings to other protocols (R17):
``[mcp_server.NAME]`` at the top, and ``[capability.binding.mcp]``,
``[capability.binding.http]``, ``[capability.binding.grpc]`` inside a
capability, with its ``binding_order``.

Sans-I/O like the rest of the manifest reader (:mod:`ampcap.caps.manifest`
and :mod:`.section` call in here): parsed TOML in,
binding descriptions (:mod:`.other_protocols`) out, every problem
reported through the reader's ``problem(message, key)`` with the key that
holds it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...decoders import json_loads
from ...errors import AmpError
from ...wire.registry import ErrorCode
from .other_protocols import (
    BINDING_KINDS,
    GrpcBinding,
    HttpBinding,
    McpBinding,
    McpServer,
    env_names,
)

__all__ = ["REMOTE_KINDS", "read_mcp_servers", "read_remote_binding", "binding_order"]

REMOTE_KINDS = ("mcp", "http", "grpc")
Problem = Callable[[str, str | None], None]

_ERROR_CODES = frozenset(int(code) for code in ErrorCode)
_SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_GRPC_METHOD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*/[A-Za-z_][A-Za-z0-9_]*$")
_HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# What each kind needs installed (looked up, not imported), and the extra that brings it.
_LIBRARIES = {"mcp": (("mcp",), "mcp"), "http": (("httpx",), "http"),
              "grpc": (("grpc", "grpc_reflection", "google.protobuf"), "grpc")}
_SERVER_KEYS = frozenset({"command", "cwd", "env", "url", "headers"})
_KEYS = {
    "mcp": frozenset({"server", "tool", "mapping", "output_mapping", "error_mapping", "timeout_ms"}),
    "http": frozenset({"method", "url", "headers", "body_template", "output_mapping", "error_mapping", "timeout_ms"}),
    "grpc": frozenset({"target", "method", "tls", "ca_file", "mapping", "output_mapping", "timeout_ms"}),
}


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _string_table(value: Any) -> dict[str, str] | None:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return value
    return None


def _no_nul(texts: list[str]) -> bool:
    return not any("\x00" in t for t in texts)


def _http_url(url: str) -> bool:
    # ${NAME} and {field} are filled later; the scheme and host must be literal.
    parts = urllib.parse.urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and "{" not in parts.netloc.replace("${", "")


def _headers(raw: Any, key: str, problem: Problem) -> tuple[tuple[str, str], ...] | None:
    table = _string_table(raw if raw is not None else {})
    if table is None:
        problem("must be a table of strings (a value may read the environment: \"Bearer ${TOKEN}\")", key)
        return None
    for name, value in table.items():
        if not name or any(c in name for c in " :\r\n\x00") or any(c in value for c in "\r\n\x00"):
            problem(f"header {name!r} has a name or value HTTP cannot carry", key)
            return None
    return tuple(table.items())


def read_mcp_servers(raw: Any, problem: Problem, base_dir: Path | None,
                     missing_program: Callable[[str, Path | None, Mapping[str, str]], str | None] | None
                     ) -> dict[str, McpServer]:
    """``[mcp_server.NAME]`` tables. ``missing_program`` (given when the
    manifest's bindings are checked) looks a stdio server's program up the
    way it will be started."""
    servers: dict[str, McpServer] = {}
    if raw is None:
        return servers
    if not isinstance(raw, dict):
        problem("must be tables [mcp_server.NAME]", "mcp_server")
        return servers
    for name, table in raw.items():
        key = f"mcp_server.{name}"
        if not _SERVER_NAME_RE.fullmatch(name):
            problem("a server name is letters, digits, '_' and '-'", key)
            continue
        if not isinstance(table, dict):
            problem("must be a table", key)
            continue
        for unknown in sorted(set(table) - _SERVER_KEYS):
            problem("unknown key (expected command, cwd, env, url, headers)", f"{key}.{unknown}")
        if ("command" in table) == ("url" in table):
            problem("needs exactly one of 'command' (a stdio server) or 'url' (streamable HTTP)", key)
            continue
        if "command" in table:
            argv = _strings(table["command"])
            if not argv or not argv[0] or not _no_nul(argv):
                problem("must be a non-empty list of strings, e.g. [\"python3\", \"server.py\"]", f"{key}.command")
                continue
            env = _string_table(table.get("env", {}))
            if env is None or not _no_nul([*env, *env.values()]):
                problem("must be a table of strings", f"{key}.env")
                continue
            cwd = table.get("cwd")
            if cwd is not None and (not isinstance(cwd, str) or "\x00" in cwd):
                problem("must be a string path", f"{key}.cwd")
                continue
            if "headers" in table:
                problem("headers apply to a server reached by url", f"{key}.headers")
            workdir = (base_dir / cwd if base_dir else Path(cwd)) if cwd else base_dir
            if missing_program is not None and (missing := missing_program(argv[0], workdir, env)):
                problem(missing, f"{key}.command")
            servers[name] = McpServer(name=name, command=tuple(argv), cwd=workdir, env=tuple(env.items()))
        else:
            url = table["url"]
            if not isinstance(url, str) or not _http_url(url) or "\x00" in url:
                problem("must be an http:// or https:// URL", f"{key}.url")
                continue
            for unknown in ("env", "cwd"):
                if unknown in table:
                    problem(f"{unknown} applies to a server started by command", f"{key}.{unknown}")
            headers = _headers(table.get("headers"), f"{key}.headers", problem)
            if headers is None:
                continue
            servers[name] = McpServer(name=name, url=url, headers=headers)
    return servers


def _mapping(raw: Any, key: str, problem: Problem) -> dict[str, str] | None:
    table = _string_table(raw if raw is not None else {})
    if table is None or any(not k or not v for k, v in table.items()):
        problem("must be a table of field names (from = \"to\")", key)
        return None
    if len(set(table.values())) != len(table):
        problem("maps two fields to the same name", key)
        return None
    return table


def _timeout(raw: Mapping[str, Any], key: str, problem: Problem) -> dict[str, int] | None:
    if "timeout_ms" not in raw:
        return {}
    value = raw["timeout_ms"]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problem("must be a positive integer (milliseconds)", f"{key}.timeout_ms")
        return None
    return {"timeout_ms": value}


def _amp_code(value: Any) -> bool:
    """One of the AMP error codes (RFC 001 §15.3): what a caller can read."""
    return isinstance(value, int) and not isinstance(value, bool) and value in _ERROR_CODES


def missing_library(kind: str) -> str | None:
    """Why a binding of ``kind`` cannot run here (its library is not
    installed), or None. Looks the modules up without importing them."""
    modules, extra = _LIBRARIES[kind]
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"{kind} bindings need {module.split('.')[0]}: pip install 'ampcap[{extra}]'"
    return None


def read_remote_binding(kind: str, raw: Any, problem: Problem, servers: Mapping[str, McpServer],
                        base_dir: Path | None, check: bool = False) -> Any:
    """One ``[capability.binding.KIND]`` table, or None after reporting why.
    ``check`` (the manifest's bindings are checked) also reports a library
    that is not installed."""
    key = f"binding.{kind}"
    if check and (missing := missing_library(kind)):
        problem(missing, key)
    if not isinstance(raw, dict):
        problem("must be a table", key)
        return None
    for unknown in sorted(set(raw) - _KEYS[kind]):
        problem(f"unknown key (expected {', '.join(sorted(_KEYS[kind]))})", f"{key}.{unknown}")
    timeout = _timeout(raw, key, problem)
    out_map = _mapping(raw.get("output_mapping"), f"{key}.output_mapping", problem)
    if timeout is None or out_map is None:
        return None
    try:
        if kind == "mcp":
            return _mcp(raw, key, problem, servers, timeout, out_map)
        if kind == "http":
            return _http(raw, key, problem, timeout, out_map)
        return _grpc(raw, key, problem, base_dir, timeout, out_map)
    except AmpError as exc:
        problem(exc.message, key)
        return None


def _mcp(raw: Mapping[str, Any], key: str, problem: Problem, servers: Mapping[str, McpServer],
         timeout: dict[str, int], out_map: dict[str, str]) -> McpBinding | None:
    server, tool = raw.get("server"), raw.get("tool")
    if not isinstance(server, str) or not server:
        problem("missing: the name of an [mcp_server.NAME] table", f"{key}.server")
        return None
    if server not in servers:
        problem(f"no [mcp_server.{server}] table in this manifest", f"{key}.server")
        return None
    if not isinstance(tool, str) or not tool:
        problem("missing: the tool's name on that server", f"{key}.tool")
        return None
    mapping = _mapping(raw.get("mapping"), f"{key}.mapping", problem)
    errors = raw.get("error_mapping", {})
    if not isinstance(errors, dict) or not all(_amp_code(v) for v in errors.values()):
        problem("must map a tool error's code to an AMP error code, e.g. NOT_FOUND = 4001, RATE_LIMIT = 3005",
                f"{key}.error_mapping")
        return None
    if mapping is None:
        return None
    return McpBinding(server=servers[server], tool=tool, mapping=mapping, output_mapping=out_map,
                      error_mapping=errors, **timeout)


def _http(raw: Mapping[str, Any], key: str, problem: Problem, timeout: dict[str, int],
          out_map: dict[str, str]) -> HttpBinding | None:
    method = raw.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in _HTTP_METHODS:
        problem(f"must be one of {', '.join(_HTTP_METHODS)}", f"{key}.method")
        return None
    url = raw.get("url")
    if not isinstance(url, str) or "\x00" in url or not _http_url(url):
        problem("must be an http:// or https:// URL (placeholders {field} and ${NAME} allowed after the host)",
                f"{key}.url")
        return None
    headers = _headers(raw.get("headers"), f"{key}.headers", problem)
    if headers is None:
        return None
    template: Any = None
    if "body_template" in raw:
        source = raw["body_template"]
        if isinstance(source, str):
            try:
                template = json_loads(source.encode("utf-8"))
            except (ValueError, UnicodeError) as exc:
                problem(f"must be JSON (placeholders go inside strings: \"{{field}}\"): {exc}",
                        f"{key}.body_template")
                return None
        elif isinstance(source, (dict, list)):
            try:
                json.dumps(source, allow_nan=False)
            except (TypeError, ValueError) as exc:
                problem(f"inline body is not plain JSON: {exc}", f"{key}.body_template")
                return None
            template = source
        else:
            problem("must be JSON text or an inline table", f"{key}.body_template")
            return None
        if any(env_names(s) for s in _strings_in(template)):
            # ${NAME} is read from the environment in url and headers only:
            # a body is echoed back by too many services to hold a secret.
            problem("${NAME} is read in url and headers only", f"{key}.body_template")
            return None
        if method.upper() == "GET":
            problem("a GET request carries no body: put the params in the url", f"{key}.body_template")
            return None
    errors: dict[int, int] = {}
    raw_errors = raw.get("error_mapping", {})
    if not isinstance(raw_errors, dict):
        problem("must map HTTP statuses to AMP error codes, e.g. 404 = 4001", f"{key}.error_mapping")
        return None
    for status, code in raw_errors.items():
        if not (isinstance(status, str) and status.isdigit() and 100 <= int(status) <= 599) or not _amp_code(code):
            problem(f"must map HTTP statuses to AMP error codes, e.g. 404 = 4001, 429 = 3005 "
                    f"(found {status} = {code!r})",
                    f"{key}.error_mapping")
            return None
        errors[int(status)] = code
    return HttpBinding(method=method.upper(), url=url, headers=headers, body_template=template,
                       output_mapping=out_map, error_mapping=errors, **timeout)


def _strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings_in(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings_in(item)]
    return []


def _grpc(raw: Mapping[str, Any], key: str, problem: Problem, base_dir: Path | None,
          timeout: dict[str, int], out_map: dict[str, str]) -> GrpcBinding | None:
    target, method = raw.get("target"), raw.get("method")
    host, sep, port = target.rpartition(":") if isinstance(target, str) else ("", "", "")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        problem("must be HOST:PORT", f"{key}.target")
        return None
    if not isinstance(method, str) or not _GRPC_METHOD_RE.fullmatch(method):
        problem("must be package.Service/Method", f"{key}.method")
        return None
    tls = raw.get("tls", False)
    if not isinstance(tls, bool):
        problem("must be true or false", f"{key}.tls")
        return None
    ca_file = raw.get("ca_file")
    if ca_file is not None and (not isinstance(ca_file, str) or "\x00" in ca_file or not tls):
        problem("a CA file (a path) applies with tls = true", f"{key}.ca_file")
        return None
    mapping = _mapping(raw.get("mapping"), f"{key}.mapping", problem)
    if mapping is None:
        return None
    ca = None if ca_file is None else (base_dir / ca_file if base_dir else Path(ca_file))
    assert isinstance(target, str)
    return GrpcBinding(target=target, method=method, tls=tls, ca_file=ca, mapping=mapping,
                       output_mapping=out_map, **timeout)


def binding_order(raw: Any, present: list[str], problem: Problem) -> list[str] | None:
    """The order bindings are tried in: ``binding_order`` when given (it
    must name each present binding once), else R17's."""
    if raw is None:
        return [kind for kind in BINDING_KINDS if kind in present]
    order = _strings(raw)
    if order is None or sorted(order) != sorted(present) or len(set(order)) != len(order):
        problem(f"must list each binding the capability has once (it has: {', '.join(present)})", "binding_order")
        return None
    return order
