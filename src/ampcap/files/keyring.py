"""Reading a keyring file, JSON or TOML (format in :mod:`ampcap.wire.keyring`)."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

from ..decoders import json_loads, toml_loads
from ..errors import AmpError
from ..wire.keyring import Keyring
from .read import read_file

__all__ = ["load_keyring"]

_MAX_KEYRING_BYTES = 1 << 20  # thousands of entries; more is not a keyring


def load_keyring(path: str | os.PathLike[str]) -> Keyring:
    """Read a JSON or TOML keyring (TOML when the name ends in ``.toml``);
    ``AmpError(1001)`` saying what is wrong with the file."""
    source = Path(path)
    try:
        raw = read_file(source, _MAX_KEYRING_BYTES)
    except FileNotFoundError as exc:
        raise AmpError(1001, f"{source}: keyring file not found") from exc
    except OSError as exc:
        raise AmpError(1001, f"{source}: cannot read keyring file: {exc.strerror or exc}") from exc
    if len(raw) > _MAX_KEYRING_BYTES:
        raise AmpError(1001, f"{source}: keyring file is larger than {_MAX_KEYRING_BYTES} bytes")
    try:
        if source.suffix.lower() == ".toml":
            data = toml_loads(raw.decode("utf-8"))
        else:
            data = json_loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AmpError(1001, f"{source}: not a valid keyring file: {exc}") from exc
    return Keyring.from_mapping(data, origin=str(source))
