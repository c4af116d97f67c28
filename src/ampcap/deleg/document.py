"""The credential file ``ampcap deleg grant`` writes and ``invoke
--delegation`` / ``deleg show`` read (JSON; reading the file is
:mod:`ampcap.files.delegation`'s job)::

    {"kind": "ampcap-delegation", "version": 1,
     "chain": ["<hex of COSE_Sign1>", ...]}

``chain`` is the delegation chain, first link (signed by the root
delegator) first, the holder's own credential last. Hex, like the keyring's
keys. A revocation file has ``"kind": "ampcap-revocation"`` and one
``"revocation"`` hex string.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import AmpError
from .cose import MAX_ARTIFACT_BYTES
from .credential import Credential, Revocation, parse_credential, parse_revocation

__all__ = ["chain_document", "chain_from_document", "revocation_document", "revocation_from_document",
           "CHAIN_KIND", "REVOCATION_KIND", "MAX_LINKS"]

CHAIN_KIND, REVOCATION_KIND = "ampcap-delegation", "ampcap-revocation"
MAX_LINKS = 64
_BAD = 1001


def chain_document(chain: Sequence[Credential]) -> dict[str, Any]:
    return {"kind": CHAIN_KIND, "version": 1, "chain": [c.raw.hex() for c in chain]}


def _hex(value: Any) -> bytes:
    if not isinstance(value, str) or len(value) > 2 * MAX_ARTIFACT_BYTES:
        raise AmpError(_BAD, f"expected a hex string of at most {MAX_ARTIFACT_BYTES} bytes")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise AmpError(_BAD, "not hex") from None


def _header(data: Any, kind: str, origin: str) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise AmpError(_BAD, f"{origin}: not an {kind} file (\"kind\": \"{kind}\" is missing)")
    if data.get("version") != 1:
        raise AmpError(_BAD, f"{origin}: unsupported version {data.get('version')!r:.20} (this ampcap reads 1)")
    return data


def chain_from_document(data: Any, origin: str = "delegation file") -> list[Credential]:
    """The credentials, decoded (signatures are checked by the verifier)."""
    data = _header(data, CHAIN_KIND, origin)
    chain = data.get("chain")
    if not isinstance(chain, list) or not chain or len(chain) > MAX_LINKS:
        raise AmpError(_BAD, f"{origin}: chain must be a non-empty list of at most {MAX_LINKS} credentials")
    out = []
    for i, item in enumerate(chain):
        try:
            out.append(parse_credential(_hex(item)))
        except AmpError as err:
            raise AmpError(err.code, f"{origin}: chain[{i}]: {err.message}") from None
    return out


def revocation_document(revocation: Revocation) -> dict[str, Any]:
    return {"kind": REVOCATION_KIND, "version": 1, "revocation": revocation.raw.hex()}


def revocation_from_document(data: Any, origin: str = "revocation file") -> Revocation:
    data = _header(data, REVOCATION_KIND, origin)
    try:
        return parse_revocation(_hex(data.get("revocation")))
    except AmpError as err:
        raise AmpError(err.code, f"{origin}: revocation: {err.message}") from None
