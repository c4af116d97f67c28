"""ampcap: capability messaging for the Agentries Agent Messaging Protocol.

The Python API (:mod:`ampcap.net.peer`) is re-exported here and loaded on
first use, so ``import ampcap.wire`` stays free of trio::

    import ampcap

    peer = ampcap.Peer()

    @peer.capability("org.example.greet", version="1.0.0")
    async def greet(name: str) -> dict: ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .errors import AmpError as AmpError
from .wire.registry import ErrorCode as ErrorCode, MessageType as MessageType

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    name: "net.peer"
    for name in ("Peer", "Remote", "Server", "Negotiate", "QueryResult", "InvocationContext", "capability",
                 "connect")
}

__all__ = ["AmpError", "ErrorCode", "MessageType", "__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from .net.peer import InvocationContext, Negotiate, Peer, QueryResult, Remote, Server, capability, connect

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
