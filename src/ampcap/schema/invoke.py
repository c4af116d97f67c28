"""The identity-form rules of a CAP_INVOKE body (RFC 004 §7.1, ruling R6).

CDDL can say what each field looks like, but not that ``id`` excludes
``negotiate`` or must agree with ``capability``/``version``: maps are open,
so a by-id body carrying ``negotiate`` would merely show an extension key.
These rules are therefore code, kept here once and used twice: by the
schema layer (after the lenient ``cap-invoke-any-form`` rule passed, so
shape faults are 1001 and only these are 4001) and by the executor's body
parser (:func:`ampcap.caps.bodies.parse_invoke_body`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..display import quoted
from .violations import Violation

__all__ = ["IDENTITY_CODE", "identity_violation"]

IDENTITY_CODE = 4001  # BAD_REQUEST: well-formed, but the identity fields conflict (R6, A.8, A.16)


def _conflict(path: str, expected: str, found: str) -> Violation:
    return Violation(path, expected, found, code=IDENTITY_CODE)


def identity_violation(body: Mapping[str, Any]) -> Violation | None:
    """The first identity-form problem of a well-shaped invoke body, or None.

    Paths are relative to the body (``id``, ``negotiate``...), like every
    other schema finding. The peer's values are quoted cut short: the
    finding goes back in an ERROR and into the log.
    """
    ident = body.get("id")
    if ident is not None:
        if "negotiate" in body:
            return _conflict("negotiate", "no 'negotiate' next to 'id'", "'id' and 'negotiate' together")
        name, sep, version = ident.partition(":")
        if not sep or not name or not version:
            return _conflict("id", "a capability id name:version", quoted(ident))
        capability = body.get("capability")
        if capability is not None and capability != name:
            return _conflict("capability", f"{quoted(name)} (the name in 'id')", quoted(capability))
        stated = body.get("version")
        if stated is not None and stated != version:
            return _conflict("version", f"{quoted(version)} (the version in 'id')", quoted(stated))
        return None
    if body.get("capability") is None and body.get("type") is None:
        return _conflict("", "'id', or 'capability'/'type' with 'version' or 'negotiate'", "none of them")
    if ("version" in body) == ("negotiate" in body):
        both = "both" if "version" in body else "neither"
        return _conflict("version", "exactly one of 'version' and 'negotiate'", both)
    return None
