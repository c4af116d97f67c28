"""Builds the RFC 005 Appendix A cases of tests/vectors/rfc005/appendix_a.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ampcap.deleg.chain import ChainVerifier, VerifierConfig
from ampcap.deleg.cose import COSE_SIGN1_TAG, default_kid, protected_header, _sig_structure
from ampcap.deleg.credential import credential_envelope
from ampcap.deleg.revocation import MemoryRevocations, RevocationChecker, StatusCache
from ampcap.wire.cbor import CBORTag, dumps
from ampcap.wire.identity import DidKeyResolver, Identity

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "rfc005" / "appendix_a.json").read_text())
NOW = VECTORS["now_ms"]
IDS = {name: Identity.from_seed(bytes.fromhex(seed)) for name, seed in VECTORS["identities"].items()}
HOUR = 3_600_000


def did(name: str) -> str:
    return IDS[name].did if name in IDS else name


def sign_payload(signer: Identity, payload: dict[str, Any], *, alg: int = -8) -> bytes:
    if alg == -8:
        protected = protected_header(default_kid(signer.did))
    else:
        protected = dumps({1: alg, 4: default_kid(signer.did).encode()})
    signature = signer.sign(_sig_structure(protected, dumps(payload)))
    return dumps(CBORTag(COSE_SIGN1_TAG, [protected, {}, dumps(payload), signature]))


def link(spec: dict[str, Any], index: int = 0, now: int = NOW) -> bytes:
    """One credential's COSE bytes from a vector's link description."""
    validity = {"issued_at": now + spec.get("issued_at", -60_000), "expires_at": now + spec.get("expires_at", HOUR)}
    if "not_before" in spec:
        validity["not_before"] = now + spec["not_before"]
    payload: dict[str, Any] = {
        "cred_v": spec.get("cred_v", 1), "delegation_id": spec.get("id", f"delegation:{index}"),
        "delegator": did(spec["from"]), "delegate": did(spec["to"]), "scope": spec["scope"], "validity": validity}
    for key in ("allow_subdelegation", "max_chain_depth", "aud"):
        if key in spec:
            payload[key] = spec[key]
    signer = IDS[spec.get("signer", spec["from"])]
    return sign_payload(signer, payload, alg=spec.get("alg", -8))


def evidence(links: list[dict[str, Any]], now: int = NOW, **extra: Any) -> dict[str, Any]:
    return {"chain": [credential_envelope(link(s, i, now)) for i, s in enumerate(links)], **extra}


def verifier(*, verifier_did: str | None = None, publisher: str | None = None, store: Any = None,
             max_chain_depth: int = 3, cache: StatusCache | None = None) -> ChainVerifier:
    checker = RevocationChecker(store=store if store is not None else MemoryRevocations(),
                                cache=cache if cache is not None else (StatusCache() if publisher else None),
                                publisher_for=(lambda d: did(publisher)) if publisher else None)
    return ChainVerifier(DidKeyResolver(), checker, VerifierConfig(verifier_did=verifier_did,
                                                                   max_chain_depth=max_chain_depth))
