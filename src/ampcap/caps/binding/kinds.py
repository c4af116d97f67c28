"""Every binding kind as one type: what a capability spec holds.

The local kinds (:mod:`.local`) and the bindings to other protocols
(:mod:`.other_protocols`) do not know each other; this module is the one
that names them all, so neither has to import the other.
"""

from __future__ import annotations

from typing import Union

from .local import CommandBinding, PythonBinding
from .other_protocols import Fallback, GrpcBinding, HttpBinding, McpBinding

__all__ = ["Binding"]

# A capability with several bindings has a Fallback (R17).
Binding = Union[PythonBinding, CommandBinding, McpBinding, HttpBinding, GrpcBinding, Fallback]
