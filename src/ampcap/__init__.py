"""ampcap: capability messaging for the Agentries Agent Messaging Protocol.

The Python API (:mod:`ampcap.net.api.peer`) is re-exported here and loaded on
first use, so ``import ampcap.wire`` stays free of trio::

    import ampcap

    peer = ampcap.Peer()

    @peer.capability("org.example.greet", version="1.0.0")
    async def greet(name: str) -> dict: ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__ as __version__
from .errors import AmpError as AmpError
from .wire.registry import ErrorCode as ErrorCode, MessageType as MessageType

# Written out (not computed) so that type checkers can read them: mypy
# --strict needs a literal __all__ and ``X as X`` re-exports.
__all__ = ["AmpError", "ErrorCode", "InvocationContext", "MessageType", "Negotiate", "Peer", "QueryResult",
           "Remote", "Server", "__version__", "capability", "connect"]

_EXPORTS: dict[str, str] = {
    name: "net.api.peer"
    for name in ("Peer", "Remote", "Server", "Negotiate", "QueryResult", "InvocationContext", "capability",
                 "connect")
}

if TYPE_CHECKING:
    from .net.api.peer import InvocationContext as InvocationContext
    from .net.api.peer import Negotiate as Negotiate
    from .net.api.peer import Peer as Peer
    from .net.api.peer import QueryResult as QueryResult
    from .net.api.peer import Remote as Remote
    from .net.api.peer import Server as Server
    from .net.api.peer import capability as capability
    from .net.api.peer import connect as connect

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
