"""Reading and writing RFC 005 credential files (format in :mod:`ampcap.deleg.document`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..decoders import json_loads
from ..deleg.credential import Credential
from ..deleg.document import chain_from_document
from ..errors import AmpError
from .read import read_file

__all__ = ["load_chain", "MAX_CHAIN_FILE"]

MAX_CHAIN_FILE = 1 << 20


def load_chain(path: str | os.PathLike[str]) -> list[Credential]:
    """The chain in a credential file; ``AmpError`` naming the file."""
    p = Path(path)
    try:
        raw = read_file(p, MAX_CHAIN_FILE)
    except OSError as exc:
        raise AmpError(1001, f"{p}: cannot read delegation file: {exc.strerror or exc}") from None
    if len(raw) > MAX_CHAIN_FILE:
        raise AmpError(1001, f"{p}: delegation file is larger than {MAX_CHAIN_FILE} bytes")
    try:
        data = json_loads(raw)
    except (ValueError, json.JSONDecodeError) as exc:
        raise AmpError(1001, f"{p}: not JSON: {exc}") from None
    return chain_from_document(data, str(p))
