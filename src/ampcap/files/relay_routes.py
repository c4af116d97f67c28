"""Reading a relay's routes file (TOML; format in :mod:`ampcap.relay.routes`)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ..decoders import toml_loads
from ..errors import AmpError
from ..relay.routes import RelayRoutes, parse_routes
from .read import read_file

__all__ = ["load_routes"]

_BAD_CONFIG = 4001
_MAX_ROUTES_BYTES = 1 << 20


def load_routes(path: str | os.PathLike[str]) -> RelayRoutes:
    """The routes in a TOML file; one ``AmpError(4001)`` naming the file and every problem."""
    p = Path(path)
    try:
        raw = read_file(p, _MAX_ROUTES_BYTES)
    except OSError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: cannot read routes file: {exc.strerror or exc}") from None
    if len(raw) > _MAX_ROUTES_BYTES:
        raise AmpError(_BAD_CONFIG, f"{p}: routes file is larger than {_MAX_ROUTES_BYTES} bytes")
    try:
        data = toml_loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise AmpError(_BAD_CONFIG, f"{p}: routes file is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: not valid TOML: {exc}") from None
    return parse_routes(data, source=str(p))
