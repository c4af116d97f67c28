"""MCP, both ways: the gateway that serves AMP peers' capabilities as MCP
tools (``ampcap mcp``, :func:`gateway`), and the bindings' MCP client.

Everything here needs the MCP SDK (the ``mcp`` distribution, 2.x), imported
only on first use: ``import ampcap.mcp`` alone loads nothing of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

__all__ = ["gateway", "serve_stdio", "serve_http"]

_EXPORTS: dict[str, str] = {"gateway": "gateway", "serve_stdio": "gateway_serve", "serve_http": "gateway_serve"}

if TYPE_CHECKING:
    from .gateway import gateway as gateway
    from .gateway_serve import serve_http as serve_http
    from .gateway_serve import serve_stdio as serve_stdio

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
