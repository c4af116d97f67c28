"""CBOR diagnostic notation (RFC 8949 §8) and JSON-safe views of decoded CBOR.

Both work on the plain Python values ``ampcap.wire.cbor.loads`` returns. Long
byte strings are shortened for humans (``h'0011…' (300 bytes)``); the JSON view
never shortens, because scripts compare bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from cbor2 import CBORSimpleValue, CBORTag, undefined

from ..display import json_safe
from ..wire.cbor import MAX_BIGNUM_BYTES

__all__ = ["diag", "to_json_value"]

_MAX_DEPTH = 64  # decoded values are depth-bounded already; this guards direct callers
# Bignums up to MAX_BIGNUM_BYTES (1024 bits) become JSON integers, as they
# become ints for application code; longer ones stay tagged bytes (Python
# refuses to print an int of more than 4,300 digits, and no reader of the
# JSON would want one).


def diag(value: Any, *, max_bytes: int = 24, max_text: int = 200) -> str:
    """One-line diagnostic notation for ``value``.

    ``max_bytes``/``max_text`` shorten long strings (0 = never shorten).
    """
    return _diag(value, max_bytes, max_text, 0)


def _diag(v: Any, max_bytes: int, max_text: int, depth: int) -> str:
    if depth > _MAX_DEPTH:
        return "…"
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is undefined:
        return "undefined"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        if max_bytes and len(b) > max_bytes:
            return f"h'{b[:max_bytes].hex()}…' ({len(b)} bytes)"
        return f"h'{b.hex()}'"
    if isinstance(v, str):
        text = v
        if max_text and len(text) > max_text:
            return json_safe(json.dumps(text[:max_text], ensure_ascii=False)) + f"… ({len(text)} chars)"
        return json_safe(json.dumps(text, ensure_ascii=False))
    if isinstance(v, dict):
        items = ", ".join(f"{_diag(k, max_bytes, max_text, depth + 1)}: {_diag(x, max_bytes, max_text, depth + 1)}"
                          for k, x in v.items())
        return "{" + items + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_diag(x, max_bytes, max_text, depth + 1) for x in v) + "]"
    if isinstance(v, CBORTag):
        return f"{v.tag}({_diag(v.value, max_bytes, max_text, depth + 1)})"
    if isinstance(v, CBORSimpleValue):
        return f"simple({v.value})"
    return repr(v)  # pragma: no cover - loads() produces nothing else


def _float(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    text = repr(f)
    # Diagnostic notation always shows a float as a float (1.0, not 1).
    return text if any(c in text for c in ".en") else text + ".0"


def to_json_value(v: Any, depth: int = 0) -> Any:
    """A JSON-serialisable view: bytes → ``{"$bytes": hex}``, bignums (tags
    2 and 3 around bytes, RFC 8949 §3.4.3) → integers, other tags →
    ``{"$tag": n, "value": …}``, non-finite floats → strings, non-text map
    keys → their diagnostic notation (and a text key that would read the
    same, such as ``"1"`` beside ``1``, → its own, ``"\"1\""``, so no entry
    is lost)."""
    if depth > _MAX_DEPTH:
        return None
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else _float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(v).hex()}
    if isinstance(v, dict):
        other = {diag(k, max_bytes=0, max_text=0) for k in v if not isinstance(k, str)}
        return {(k if isinstance(k, str) and k not in other else diag(k, max_bytes=0, max_text=0)):
                to_json_value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json_value(x, depth + 1) for x in v]
    if isinstance(v, CBORTag):
        if v.tag in (2, 3) and isinstance(v.value, bytes) and len(v.value) <= MAX_BIGNUM_BYTES:
            n = int.from_bytes(v.value, "big")
            return n if v.tag == 2 else -1 - n
        return {"$tag": v.tag, "value": to_json_value(v.value, depth + 1)}
    if v is undefined:
        return {"$simple": "undefined"}
    if isinstance(v, CBORSimpleValue):
        return {"$simple": v.value}
    return repr(v)  # pragma: no cover
