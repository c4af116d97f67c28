"""The binding model: what a manifest says implements a capability.

Descriptions only, sans-I/O: nothing in this package runs a binding. The
runners are elsewhere, at the trio edge: the daemon's bindings runner runs
the local kinds and :mod:`ampcap.bindings` the bindings to other protocols.

- :mod:`.local`: the local kinds, ``python`` and ``command``, and the
  bounds on ``timeout_ms``;
- :mod:`.other_protocols`: the bindings to other protocols (R17: MCP, HTTP,
  gRPC), a capability's ordered set of bindings (:class:`Fallback`), and the
  transformations they need that do no I/O;
- :mod:`.kinds`: the union of all of them (:data:`Binding`);
- :mod:`.context`: :class:`InvocationContext`, what a capability callable is
  handed besides its params;
- :mod:`.section` and :mod:`.tables`: reading a capability's ``binding`` key
  and the ``[mcp_server.NAME]`` / ``[capability.binding.*]`` tables of a
  manifest.

The main names are re-exported here, loaded on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

# name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "Binding": "kinds",
    "InvocationContext": "context",
    "PythonBinding": "local", "CommandBinding": "local",
    "McpServer": "other_protocols", "McpBinding": "other_protocols", "HttpBinding": "other_protocols",
    "GrpcBinding": "other_protocols", "Fallback": "other_protocols", "NotRun": "other_protocols",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from .context import InvocationContext
    from .kinds import Binding
    from .local import CommandBinding, PythonBinding
    from .other_protocols import Fallback, GrpcBinding, HttpBinding, McpBinding, McpServer, NotRun


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
