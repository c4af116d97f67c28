"""The runners of capability bindings, at the trio edge.

What a binding *is* (its description, its manifest table) is the sans-I/O
model in :mod:`ampcap.caps.binding`; this package *runs* bindings:
:mod:`.runner` (:class:`~ampcap.bindings.runner.BindingRunner`) runs any
capability's binding for the daemon's jobs and the Python API: Python
callables and commands itself, and bindings to other protocols (R17)
through :mod:`.protocols` (:class:`RemoteBindings`), imported only when a
manifest has such a binding: one module per kind (:mod:`.mcp`,
:mod:`.http`, :mod:`.grpc`), each importing its library lazily, and
:mod:`.fallback`, the order several bindings of one capability are tried.

This package sits beside :mod:`ampcap.net` and never imports it (nor the
CLI or the interop harness; tests/test_layers.py). Its names load on first
use, so importing the runner does not load the protocol clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

__all__ = ["RemoteBindings", "servers_of"]

if TYPE_CHECKING:
    from .protocols import RemoteBindings as RemoteBindings
    from .protocols import servers_of as servers_of

__getattr__, __dir__ = lazy_exports(__name__, {"RemoteBindings": "protocols", "servers_of": "protocols"})
