"""ampcap: capability messaging for the Agentries Agent Messaging Protocol."""

from .errors import AmpError as AmpError
from .wire.registry import ErrorCode as ErrorCode, MessageType as MessageType

__version__ = "0.1.0"

__all__ = ["AmpError", "ErrorCode", "MessageType", "__version__"]
