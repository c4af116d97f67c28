"""Reading a policy file (format in ``docs/policy.md``; the rules are
:mod:`ampcap.peer.policy`'s)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ..decoders import toml_loads
from ..errors import AmpError
from ..peer.policy import Policy, parse_policy
from .read import read_file

__all__ = ["load_policy"]

_BAD_CONFIG = 4001
_MAX_POLICY_BYTES = 1 << 20  # thousands of rules; more is a wrong path


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """The policy in a TOML file; one ``AmpError(4001)`` naming the file
    and every problem in it."""
    p = Path(path)
    try:
        raw = read_file(p, _MAX_POLICY_BYTES)
    except OSError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: cannot read policy file: {exc.strerror or exc}") from None
    if len(raw) > _MAX_POLICY_BYTES:
        raise AmpError(_BAD_CONFIG, f"{p}: policy file is larger than {_MAX_POLICY_BYTES} bytes")
    try:
        data = toml_loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise AmpError(_BAD_CONFIG, f"{p}: policy file is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise AmpError(_BAD_CONFIG, f"{p}: not valid TOML: {exc}") from None
    return parse_policy(data, source=str(p))
