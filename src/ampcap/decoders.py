"""Decoding the JSON and TOML a user hands us (files and flags).

``json`` and ``tomllib`` recurse once per nesting level, so a file or flag
nested a few thousand levels deep (``[[[[…``) makes them raise
``RecursionError`` rather than their decode error, and every caller that
reports a bad file by catching the decode error would let it through as a
traceback. These wrappers turn it into that decode error.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_loads", "toml_loads"]

_TOO_DEEP = "nested too deeply"


def json_loads(text: str | bytes) -> Any:
    """``json.loads``; ``json.JSONDecodeError`` for any input it cannot take."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(_TOO_DEEP, "", 0) from None


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``; ``tomllib.TOMLDecodeError`` for any input it cannot take."""
    import tomllib  # here: every command imports this module, few read TOML

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(_TOO_DEEP) from None
