"""A client's descriptor trust profile file (RFC 004 §5.2, docs/payments.md):
TOML read here, checked by :func:`ampcap.caps.descriptor_trust.trust_from_mapping`::

    require_signatures = "all"              # or ["org.agentries.payment.workflow", …]
    [owners]
    "org.agentries.payment" = ["did:key:z6Mk…"]
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ..caps.descriptor_trust import DescriptorTrust, trust_from_mapping
from ..decoders import toml_loads
from ..errors import AmpError
from .read import read_file

__all__ = ["load_trust"]

_MAX_BYTES = 1 << 20
_BAD_CONFIG = 4001


def load_trust(path: str | os.PathLike[str]) -> DescriptorTrust:
    """The trust profile in a TOML file, or one ``AmpError(4001)`` naming the file."""
    p = Path(path)
    try:
        raw = read_file(p, _MAX_BYTES)
    except OSError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: cannot read trust profile: {exc.strerror or exc}") from None
    if len(raw) > _MAX_BYTES:
        raise AmpError(_BAD_CONFIG, f"{p}: trust profile is larger than {_MAX_BYTES} bytes")
    try:
        data = toml_loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise AmpError(_BAD_CONFIG, f"{p}: trust profile is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: not valid TOML: {exc}") from None
    try:
        return trust_from_mapping(data)
    except AmpError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: {exc.message}") from None
