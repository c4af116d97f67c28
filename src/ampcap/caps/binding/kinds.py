"""Every binding kind as one type: what a capability spec holds.

The bindings to other protocols (:mod:`.other_protocols`) build on the
local kinds (:mod:`.local`: the timeout bounds), and the local kinds never
import them back; this module is the one that names them all.
"""

from __future__ import annotations

from typing import Union

from .local import CommandBinding, PythonBinding
from .other_protocols import Fallback, GrpcBinding, HttpBinding, McpBinding

__all__ = ["Binding"]

# A capability with several bindings has a Fallback (R17).
Binding = Union[PythonBinding, CommandBinding, McpBinding, HttpBinding, GrpcBinding, Fallback]
