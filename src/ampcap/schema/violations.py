"""What the CDDL engine reports: findings about values (:class:`Violation`)
and faults in the schema text itself (:class:`SchemaError`).

Findings are short on purpose: they end up in an ERROR body's ``details``
and on one line of a packet dump.
"""

from __future__ import annotations

from typing import Any, Literal

from cbor2 import CBORTag
import msgspec

from ..errors import AmpError

__all__ = ["Violation", "SchemaError", "ERROR", "EXTENSION_KEY", "describe_found", "join_key", "join_index"]

ERROR: Literal["error"] = "error"
EXTENSION_KEY: Literal["extension-key"] = "extension-key"

# Wire code for shape/type failures (RFC 001 §15.3 INVALID_MESSAGE); the
# identity-form rules of ruling R6 use 4001 instead (schema/invoke.py).
SHAPE_CODE = 1001


class Violation(msgspec.Struct, frozen=True):
    """One finding. ``path`` locates it (``body.capabilities[0].input_schema.hash``;
    ``""`` is the value itself), ``expected``/``found`` say what went wrong."""

    path: str
    expected: str
    found: str
    kind: Literal["error", "extension-key"] = ERROR
    code: int = SHAPE_CODE

    def __str__(self) -> str:
        where = self.path or "(value)"
        if self.kind == EXTENSION_KEY:
            return f"{where}: extension key (not in the schema)"
        return f"{where}: expected {self.expected}, found {self.found}"


class SchemaError(AmpError):
    """The schema text cannot be used: a syntax error, a construct the engine
    does not support, a duplicate rule or an undefined reference. Raised at
    load time, never while validating, and always names ``file:line``."""

    def __init__(self, file: str, line: int | None, message: str) -> None:
        where = f"{file}:{line}" if line is not None else file
        super().__init__(5001, f"{where}: {message}")
        self.file = file
        self.line = line
        self.reason = message


def join_key(path: str, key: Any) -> str:
    """Path of a map member. Text keys read like attributes; anything else
    is bracketed so it cannot be confused with a name."""
    if isinstance(key, str):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def join_index(path: str, index: int) -> str:
    return f"{path}[{index}]"


_MAX_SHOWN = 24


def _short(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def describe_found(value: Any) -> str:
    """A few words about a value, in CDDL's vocabulary (``uint 5``,
    ``tstr "abc"``, ``bstr of 31 bytes``, ``map``)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return f"uint {value}" if value >= 0 else f"nint {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        return f"tstr {_short(repr(value))}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"bstr of {len(value)} bytes"
    if isinstance(value, dict):
        return f"map of {len(value)} entries" if value else "empty map"
    if isinstance(value, (list, tuple)):
        return f"array of {len(value)} items" if value else "empty array"
    if isinstance(value, CBORTag):
        return f"tag {value.tag}"
    return f"{type(value).__name__} (not a CBOR value)"
