"""MCP (the Model Context Protocol), the one home of ampcap's MCP code.

- :mod:`ampcap.mcp.sdk`: the official SDK imported lazily (``pip install
  'ampcap[mcp]'``), and the conversions every MCP user of ampcap shares: a
  tool result as JSON (ruling R17), a tool error's code, tool schemas.
- :mod:`ampcap.mcp.client`: the client side. One session per MCP server
  (a stdio command or a streamable HTTP URL) carrying every call, started
  once, restarted with backoff when it dies, calls cancelled with
  ``notifications/cancelled``, progress passed on. It does not import
  :mod:`ampcap.net`: the bindings (:mod:`ampcap.bindings`) build on it.
- The gateway (``ampcap mcp``, :func:`gateway`, :func:`serve_stdio`,
  :func:`serve_http`): AMP peers' capabilities served as MCP tools (R18);
  it sits above :mod:`ampcap.net`, a client of the Python API.

``import ampcap.mcp`` alone loads nothing of the SDK.
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
