"""Running the bindings to other protocols (ruling R17): MCP, HTTP, gRPC.

:class:`RemoteBindings` is what :mod:`ampcap.bindings.runner` hands an
MCP, HTTP or gRPC binding to (it imports this module only when a manifest
has such a binding): one module per kind (:mod:`.mcp`, :mod:`.http`,
:mod:`.grpc`), each importing its library lazily, and :mod:`.fallback`, the
order in which a capability's several bindings are tried. It is given a
nursery and an invocation context, and it answers with a result or an
``AmpError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import trio

from ..caps.binding.context import InvocationContext
from ..caps.binding.tables import missing_library
from ..caps.binding.other_protocols import Fallback, GrpcBinding, HttpBinding, McpBinding, McpServer, NotRun

__all__ = ["RemoteBindings", "servers_of"]


def servers_of(bindings: Iterable[Any]) -> list[McpServer]:
    """The MCP servers ``bindings`` use (inside fallbacks too), each once."""
    found: dict[McpServer, None] = {}
    for binding in bindings:
        for one in binding.bindings if isinstance(binding, Fallback) else (binding,):
            if isinstance(one, McpBinding):
                found.setdefault(one.server)
    return list(found)


class RemoteBindings:
    """The daemon's clients of other protocols: one MCP session per server,
    one HTTP connection pool, one gRPC channel per target; all closed by
    :meth:`aclose` (the daemon's drain)."""

    def __init__(self, nursery: trio.Nursery, *, environ: Mapping[str, str] | None = None,
                 mcp_connect_timeout_s: float = 10.0) -> None:
        self._nursery = nursery
        self._environ = os.environ if environ is None else environ
        self._mcp_connect_timeout_s = mcp_connect_timeout_s
        self._mcp: Any = None
        self._http: Any = None
        self._grpc: Any = None
        self._checked: set[str] = set()

    def mcp(self) -> Any:
        if self._mcp is None:
            from ..mcp.client import McpClients

            self._mcp = McpClients(self._nursery, environ=self._environ,
                                   connect_timeout_s=self._mcp_connect_timeout_s)
        return self._mcp

    async def start(self, bindings: Iterable[Any]) -> None:
        """Start (or connect) every MCP server ``bindings`` use, once; a
        server that fails is logged and retried, and does not stop us."""
        servers = servers_of(bindings)
        if servers:
            await self.mcp().start(servers)

    async def run(self, binding: Any, params: Any, context: InvocationContext) -> Any:
        kind = getattr(binding, "kind", "")
        if kind not in self._checked:
            # Once per kind: a library that is not installed means the binding
            # cannot run (the next one may), said in words, not an ImportError.
            if kind in ("mcp", "http", "grpc") and (missing := missing_library(kind)):
                raise NotRun(5002, missing)
            self._checked.add(kind)
        if isinstance(binding, McpBinding):
            from .mcp import run_mcp

            return await run_mcp(self.mcp(), binding, params, context)
        if isinstance(binding, HttpBinding):
            from .http import HttpRunner

            if self._http is None:
                self._http = HttpRunner(self._environ)
            return await self._http.run(binding, params, context)
        if isinstance(binding, GrpcBinding):
            from .grpc import GrpcRunner

            if self._grpc is None:
                self._grpc = GrpcRunner()
            return await self._grpc.run(binding, params, context)
        raise TypeError(f"not a remote binding: {binding!r}")

    async def aclose(self) -> None:
        if self._mcp is not None:
            self._mcp.close()
        if self._http is not None:
            await self._http.aclose()
        if self._grpc is not None:
            self._grpc.close()
