"""A delegated invoke at the executor (RFC 005 in RFC 004's §7.2 order).

The executor calls in here for a CAP_INVOKE whose signed body carries
``delegation``:

* :func:`decide` is step 3: the chain verifier (``deleg/chain.py``) decides
  for the requested capability, and a refusal leaves with minimal detail
  for the caller (RFC 005 §8, RFC 004 §7.2: "delegation invalid" and what
  the caller's own credential already shows, :func:`caller_message`, or
  the one denial every refused caller gets, R10) while the audit keeps the
  whole reason;
* :func:`check_negotiated` is the part of step 6 a scope naming capability
  ids adds: the version negotiation chose must be one the scope names (a
  pinned version was already checked at step 3);
* :class:`Audit` is the action carrying each decision, allowed or denied
  (§6.4), and :func:`audit_line` its one log line.

A refusal is raised as :class:`DelegationDenied`, carrying both the error
for the caller and the decision for the audit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import replace as replace_struct

from ..caps.bodies import InvokeRequest
from ..deleg.chain import ChainVerifier, Decision, Step
from ..deleg.scope import Target, check_target
from ..display import shown
from ..errors import AmpError
from ..wire.envelope import Envelope

__all__ = ["Audit", "audit_line", "DelegationDenied", "decide", "check_negotiated", "caller_message"]

UNAUTHORIZED, DELEGATION_INVALID = 3001, 3004

# What a refused delegate is told. Minimal detail (RFC 005 §8, RFC 004
# §7.2) is read here as: nothing the caller could not work out from the
# chain it sent and the request it made (`ampcap deleg show` does exactly
# that), and nothing about others. So the steps that judge only those
# bytes (continuity, validity times and aud, subdelegation, narrowing, the
# target) pass their own reason, which names links by position and no DID;
# revocation says "revoked", which DELEG_QUERY tells anyone. A signature
# step is one fixed sentence whatever went wrong: "key cannot be resolved"
# against "does not verify" would tell whether a delegator's DID exists
# (§8's privacy guidance). Parse errors are one sentence too (their text
# may quote the peer's bytes back).
_FIXED = {Step.PARSE: "a credential in the chain cannot be read",
          Step.SIGNATURES: "a credential's signature cannot be verified"}
_OWN_REASON = frozenset({Step.CONTINUITY, Step.VALIDITY, Step.REVOCATION, Step.SUBDELEGATION,
                         Step.NARROWING, Step.TARGET})


def caller_message(decision: Decision) -> str:
    """The 3004 message for the delegate refused by ``decision``."""
    err = decision.error
    if decision.step in _FIXED:
        return f"delegation invalid: {_FIXED[decision.step]}"
    if err is not None and decision.step in _OWN_REASON:
        return f"delegation invalid: {shown(err.message, 200)}"
    return "delegation invalid"


class Audit(msgspec.Struct, frozen=True):
    """RFC 005 §6.4: a delegated invoke's decision, allowed or denied. The
    edge keeps or logs it (:func:`audit_line`); building the line costs
    nothing when nobody reads it."""

    decision: Decision

    @property
    def line(self) -> str:
        return audit_line(self.decision)


class DelegationDenied(Exception):
    """A delegation step refused the invoke: the error for the caller and
    the decision (with its audit record) for the log."""

    def __init__(self, error: AmpError, decision: Decision) -> None:
        super().__init__(error.message)
        self.error, self.decision = error, decision


def audit_line(decision: Decision) -> str:
    """RFC 005 §6.4: one line per delegated decision (ids and DIDs, no payloads).
    The DIDs passed the DID grammar (printable ASCII) where they were read;
    delegation ids are the peer's text, shown escaped and cut."""
    err, t = decision.error, decision.target
    ids = ",".join(f"{c.delegator}/{shown(c.delegation_id, 80)}" for c in decision.chain)
    what = "-" if t is None else shown(t.capability_id or t.capability)
    return (f"delegation {'allow' if err is None else 'deny'} code={0 if err is None else err.code} "
            f"step={decision.step_label} requester={decision.caller} "
            f"delegator={decision.delegator or '-'} ids=[{ids}] target={what} "
            f"at={decision.evaluated_at}: {'allowed' if err is None else shown(err.message)}")


def decide(verifier: ChainVerifier | None, env: Envelope, evidence_owner: Any, request: InvokeRequest, name: str,
           now_ms: int, denied: Callable[[], AmpError]) -> Decision:
    """Step 3 for ``evidence_owner`` (the CAP_INVOKE body) carrying
    ``delegation``, asking for canonical ``name``. ``verifier`` None: no
    delegation is accepted (3004). ``denied()``: the executor's one denial,
    what an UNAUTHORIZED verdict becomes for the caller."""
    evidence = evidence_owner["delegation"]
    if verifier is None:
        raise AmpError(DELEGATION_INVALID, "delegation is not accepted by this agent")
    capability_id = request.capability_id
    if capability_id is None and request.version is not None:
        # The version as sent (it parsed as SemVer at step 1); str(Version) would rebuild it.
        version = evidence_owner.get("version")
        capability_id = f"{name}:{version if isinstance(version, str) else request.version}"
    target = Target(capability=name, capability_id=capability_id)
    decision = verifier.evaluate(typ=env.typ, evidence=evidence, caller=env.sender, target=target, now_ms=now_ms)
    if decision.error is not None:
        err = decision.error
        # §8 / RFC 004 §7.2: minimal detail towards the caller (the audit keeps the reason).
        if err.code == DELEGATION_INVALID:
            err = AmpError(DELEGATION_INVALID, caller_message(decision))
        elif err.code == UNAUTHORIZED:
            err = denied()
        raise DelegationDenied(err, decision)
    return decision


def check_negotiated(decision: Decision, name: str, capability_id: str) -> None:
    """Step 6's addition for a scope that names capability ids: the
    ``capability_id`` negotiation chose for ``name`` must be among them
    (:class:`DelegationDenied` 3004 otherwise)."""
    if not (decision.effective is not None and decision.effective.names_ids
            and (decision.target is None or decision.target.capability_id != capability_id)):
        return
    # A scope that names ids holds the version negotiation chose to them
    # (a pinned version was checked at step 3 already).
    asked = decision.target or Target(capability=name)
    try:
        check_target(decision.effective, Target(capability=name, capability_id=capability_id,
                                                action=asked.action, resource=asked.resource))
    except AmpError as err:
        refused = replace_struct(decision, allowed=False, error=err, step=Step.TARGET)
        raise DelegationDenied(AmpError(DELEGATION_INVALID, caller_message(refused)), refused) from None
