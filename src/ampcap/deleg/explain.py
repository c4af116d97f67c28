"""A chain explained for people: each link and the §6.1 verdict (``ampcap
deleg show`` and ``ampcap dump``). The verdict is the verifier's own, run
with the given caller, target and revocation store; signatures are checked
with the resolver given (did:key needs none)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..wire.identity import DidKeyResolver, KeyResolver
from ..wire.registry import MessageType, error_info
from .chain import STEPS, ChainVerifier, VerifierConfig
from .credential import Credential
from .revocation import MemoryRevocations, RevocationChecker, RevocationStore
from .scope import Target

__all__ = ["explain_chain", "describe_link"]


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def describe_link(cred: Credential) -> dict[str, Any]:
    out: dict[str, Any] = {"delegation_id": cred.delegation_id, "delegator": cred.delegator,
                           "delegate": cred.delegate, "scope": cred.scope.to_wire(),
                           "issued_at": cred.issued_at, "not_before": cred.not_before,
                           "expires_at": cred.expires_at, "allow_subdelegation": cred.allow_subdelegation,
                           "kid": cred.signed.kid}
    if cred.max_chain_depth is not None:
        out["max_chain_depth"] = cred.max_chain_depth
    if cred.aud is not None:
        out["aud"] = list(cred.aud)
    return out


def explain_chain(chain: Sequence[Credential] | dict[str, Any], *, caller: str | None, capability: str | None,
                  action: str = "invoke", resource: str | None = None, verifier_did: str | None = None,
                  now_ms: int, resolver: KeyResolver | None = None,
                  revocations: RevocationStore | None = None, typ: int = int(MessageType.CAP_INVOKE)
                  ) -> dict[str, Any]:
    """``{"links": [...], "verdict": {...}, "lines": [...]}``. ``chain`` is
    decoded credentials or an evidence map as carried in a CAP_INVOKE."""
    evidence = chain if isinstance(chain, dict) else {"chain": [c.envelope() for c in chain]}
    verifier = ChainVerifier(resolver or DidKeyResolver(),
                             RevocationChecker(store=revocations if revocations is not None else MemoryRevocations()),
                             VerifierConfig(verifier_did=verifier_did, max_chain_depth=64))
    target = None
    if capability is not None:
        name, colon, _ = capability.partition(":")
        target = Target(capability=name, capability_id=capability if colon else None, action=action,
                        resource=resource)
    links = list(chain) if not isinstance(chain, dict) else []
    last = caller
    if last is None:
        last = links[-1].delegate if links else ""
    if typ == int(MessageType.DELEG_GRANT):
        typ = int(MessageType.CAP_INVOKE)  # a grant is judged as the chain it starts
    if not last and caller is None and isinstance(chain, dict):
        # Who holds it is not known (a DELEG_GRANT): the chain's own last delegate.
        decoded = ChainVerifier(resolver or DidKeyResolver(), RevocationChecker(store=MemoryRevocations()),
                                VerifierConfig(max_chain_depth=64)).evaluate(
            typ=typ, evidence=evidence, caller="", target=None, now_ms=now_ms)
        if decoded.chain:
            last = decoded.chain[-1].delegate
    decision = verifier.evaluate(typ=typ, evidence=evidence, caller=last, target=target, now_ms=now_ms)
    links = links or list(decision.chain)
    verdict = decision.audit.to_json()
    if decision.error is not None:
        verdict["code_name"] = error_info(decision.error.code).name
    lines = []
    for i, cred in enumerate(links):
        scope = cred.scope.to_wire()
        dims = "; ".join(f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in scope.items())
        flags = []
        if cred.allow_subdelegation:
            flags.append("may subdelegate" + (f" (≤{cred.max_chain_depth} more)" if cred.max_chain_depth else ""))
        if cred.aud:
            flags.append("aud=" + ",".join(cred.aud))
        lines.append(f"link {i + 1}: {cred.delegation_id}  {cred.delegator} -> {cred.delegate}")
        lines.append(f"  scope: {dims}")
        lines.append(f"  valid {_when(cred.not_before)} .. {_when(cred.expires_at)}"
                     + (f"  [{'; '.join(flags)}]" if flags else ""))
    asked = "any target (scope not checked)" if target is None else \
        f"{capability} action={action}" + (f" resource={resource}" if resource else "")
    if decision.allowed:
        lines.append(f"verdict: ALLOW for {last} on {asked}; acting for {decision.delegator}")
    else:
        assert decision.error is not None
        step = next((what for s, what, _ in STEPS if f"{s.value} {s.name.lower()}" == decision.audit.step), "")
        lines.append(f"verdict: DENY {decision.error.code} {error_info(decision.error.code).name} for {last} "
                     f"on {asked}: {decision.error.message} (step {decision.audit.step}: {step})")
    return {"links": [describe_link(c) for c in links], "verdict": verdict, "lines": lines}
