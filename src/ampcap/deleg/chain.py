"""Chain validation: RFC 005 §6.1 in its order, as a table of steps.

:data:`STEPS` lists the ten steps of §6.1; :meth:`ChainVerifier.evaluate`
runs them in that order and the first failing step decides the code (§8).
Every evaluation, allowed or denied, yields a :class:`Decision` with its
:class:`AuditRecord` (§6.4).

Caller binding (§6.2, RFC 002 §7) is checked with continuity (step 3): the
requester is the chain's last delegate, or the request is refused 3001
(A.6). Two bounds come before step 2 parses anything, so a hostile chain
costs little: its length (``max_chain_depth``, 3004 like step 7 would say)
and each credential's size.

Cache (RFC 005 §3 with RFC 006: validated chain fingerprints may be
cached). What costs is decoding and verifying signatures, so the verifier
remembers *links* whose signature verified, keyed by their COSE bytes
(bounded LRU). A link from the cache skips steps 2 and 4 only: continuity,
validity, audience, revocation, depth, narrowing and the target are decided
afresh for every request, so the cache can never outlive an expiry or a
revocation.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import AmpError
from ..wire.identity import KeyResolver
from ..wire.registry import MessageType
from .cose import verify_sign1
from .credential import FORMAT, Credential, credential_envelope, parse_credential, parse_envelope
from .revocation import RevocationChecker
from .scope import EffectiveScope, Target, check_target, narrow

__all__ = ["Step", "STEPS", "VerifierConfig", "Evidence", "AuditRecord", "Decision", "ChainVerifier",
           "parse_evidence", "evidence_body"]

MALFORMED, BAD_REQUEST, UNAUTHORIZED, DELEGATION_INVALID, INTERNAL = 1001, 4001, 3001, 3004, 5001
_INVOKE = int(MessageType.CAP_INVOKE)


class Step(enum.Enum):
    MESSAGE_TYPE = 1
    PARSE = 2
    CONTINUITY = 3
    SIGNATURES = 4
    VALIDITY = 5
    REVOCATION = 6
    SUBDELEGATION = 7
    NARROWING = 8
    TARGET = 9
    DECISION = 10


# §6.1, in order: the step, what it checks, the codes it may give.
STEPS: tuple[tuple[Step, str, tuple[int, ...]], ...] = (
    (Step.MESSAGE_TYPE, "the message is a CAP_INVOKE", (BAD_REQUEST,)),
    (Step.PARSE, "evidence and each credential envelope parse", (1004, DELEGATION_INVALID)),
    (Step.CONTINUITY, "link[i].delegate == link[i+1].delegator; last delegate == caller",
     (DELEGATION_INVALID, UNAUTHORIZED)),
    (Step.SIGNATURES, "each link signed by its delegator's key (kid)", (DELEGATION_INVALID,)),
    (Step.VALIDITY, "not_before <= now < expires_at, and aud names this verifier", (DELEGATION_INVALID,)),
    (Step.REVOCATION, "no link revoked; publisher status fresh", (DELEGATION_INVALID, 5002)),
    (Step.SUBDELEGATION, "allow_subdelegation and max_chain_depth", (DELEGATION_INVALID,)),
    (Step.NARROWING, "no link widens the scope", (DELEGATION_INVALID,)),
    (Step.TARGET, "the request is inside the effective scope", (DELEGATION_INVALID,)),
    (Step.DECISION, "allow, with an audit record", ()),
)

MAX_PROOF = 1024
_STEP_LABELS = {step: f"{step.value} {step.name.lower()}" for step, _what, _codes in STEPS}
# What a validated chain's bytes alone decide (with the keys, which a chain
# cannot change): a chain found in the verifier's cache skips these steps
# (ChainVerifier._evaluate_known). Continuity's caller binding, validity,
# audience, revocation and the target depend on the request and the clock,
# and run every time.
_DECIDED_BY_CACHE = frozenset((Step.PARSE, Step.SIGNATURES, Step.SUBDELEGATION, Step.NARROWING))


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifierConfig:
    verifier_did: str | None = None
    """This verifier's DID, for ``aud`` (§4.3); None: any aud fails."""
    max_chain_depth: int = 3
    """Links accepted in one chain (the consumer profile needs at least 3)."""
    max_skew_ms: int = 30_000
    """A link issued by a clock ahead of ours is accepted this early; expiry is exact."""
    supported_constraints: frozenset[str] = frozenset()
    link_cache_entries: int = 4096

    def __post_init__(self) -> None:
        if not 3 <= self.max_chain_depth <= 64:
            raise ValueError("max_chain_depth must be between 3 and 64 (RFC 005 §2.2 needs 3)")
        if self.max_skew_ms < 0 or self.link_cache_entries < 0:
            raise ValueError("max_skew_ms and link_cache_entries must not be negative")


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed ``delegation-evidence`` (§5.4): the chain's COSE bytes."""

    chain: tuple[bytes, ...]
    proof: bytes | None = None
    target: Mapping[str, str] = msgspec.field(default_factory=dict)


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True):
    """§6.4. No credential payloads: ids and DIDs only (§6.4, §11)."""

    decision: str  # "allow" | "deny"
    reason_code: int  # 0 when allowed, else the AMP code
    reason: str
    requester_did: str
    effective_delegator_did: str | None
    delegation_ids: tuple[tuple[str, str], ...]  # (delegator, delegation_id) per link
    target: Mapping[str, str | None]
    evaluated_at: int
    step: str
    revocation_sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "reason_code": self.reason_code, "reason": self.reason,
                "requester_did": self.requester_did, "effective_delegator_did": self.effective_delegator_did,
                "delegation_ids": [{"delegator": d, "delegation_id": i} for d, i in self.delegation_ids],
                "target": dict(self.target), "evaluated_at": self.evaluated_at, "step": self.step,
                "revocation_sources": list(self.revocation_sources)}


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict. Its :attr:`audit` record is built when asked for: the
    executor's audit line reads the fields below directly. (A Struct: one is
    made for every delegated invoke, and a frozen dataclass costs ten times
    as much to create; ``msgspec.structs.replace`` derives a changed one.)"""

    allowed: bool
    error: AmpError | None
    caller: str
    target: Target | None
    """The target as evaluated (with the evidence's action and resource)."""
    evaluated_at: int
    step: Step
    chain: tuple[Credential, ...] = ()
    effective: EffectiveScope | None = None
    sources: tuple[str, ...] = ()

    @property
    def step_label(self) -> str:
        return _STEP_LABELS[self.step]

    @property
    def audit(self) -> AuditRecord:
        err = self.error
        t = self.target if self.target is not None else Target(capability="-", action="-")
        return AuditRecord(
            decision="allow" if err is None else "deny", reason_code=0 if err is None else err.code,
            reason="allowed" if err is None else err.message, requester_did=self.caller,
            effective_delegator_did=self.delegator, delegation_ids=tuple(c.key for c in self.chain),
            target={"capability": t.capability_id or t.capability, "action": t.action, "resource": t.resource},
            evaluated_at=self.evaluated_at, step=_STEP_LABELS[self.step], revocation_sources=self.sources)

    @property
    def delegator(self) -> str | None:
        """The principal the caller acts for: the first link's delegator."""
        return self.chain[0].delegator if self.chain else None

    def raise_if_denied(self) -> None:
        if self.error is not None:
            raise self.error


def evidence_body(chain: Any, *, target: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``delegation`` value of a CAP_INVOKE body: from an evidence map
    (returned as is), or a sequence of :class:`Credential` / COSE bytes /
    credential envelopes, first link first."""
    if isinstance(chain, Mapping):
        return dict(chain)
    if isinstance(chain, (bytes, Credential)):
        chain = [chain]
    links: list[Any] = []
    for item in chain:
        if isinstance(item, Credential):
            links.append(item.envelope())
        elif isinstance(item, bytes):
            links.append(credential_envelope(item))
        elif isinstance(item, Mapping):
            links.append(dict(item))
        else:
            raise TypeError(f"a delegation chain holds credentials, not {type(item).__name__}")
    out: dict[str, Any] = {"chain": links}
    if target:
        out["target"] = dict(target)
    return out


_NO_TARGET: Mapping[str, str] = {}
_TARGET_KEYS = frozenset(("capability", "action", "resource"))


def _credential_bytes(item: Any, i: int) -> bytes:
    # The well-formed envelope in one test; parse_envelope says what is wrong.
    if type(item) is dict and len(item) == 2 and item.get("format") == FORMAT:
        raw = item.get("credential")
        if type(raw) is bytes:
            return raw
    return parse_envelope(item, f"body.delegation.chain[{i}]")


def parse_evidence(raw: Any, max_links: int = 64) -> Evidence:
    """Step 2's outer shape: 1001 for what is no ``delegation-evidence``."""
    if not isinstance(raw, dict):
        raise AmpError(MALFORMED, "delegation must be a map with a chain", path="body.delegation")
    chain = raw.get("chain")
    if not isinstance(chain, list) or not chain:
        raise AmpError(MALFORMED, "delegation.chain must be a non-empty array", path="body.delegation.chain")
    if len(chain) > max_links:
        # Before anything is decoded: a long chain costs nothing (step 7's code).
        raise AmpError(DELEGATION_INVALID, f"the chain has {len(chain)} links; at most {max_links} are accepted")
    found = []
    for item in chain:  # the well-formed envelope in one test; the slow path says what is wrong
        if type(item) is dict and len(item) == 2 and item.get("format") == FORMAT:
            cred = item.get("credential")
            if type(cred) is bytes:
                found.append(cred)
                continue
        found.append(_credential_bytes(item, len(found)))
    links = tuple(found)
    proof = raw.get("proof")
    if proof is not None and (not isinstance(proof, bytes) or len(proof) > MAX_PROOF):
        raise AmpError(MALFORMED, "delegation.proof must be a byte string", path="body.delegation.proof")
    target = raw.get("target", _NO_TARGET)
    if target is not _NO_TARGET and (not isinstance(target, dict) or not all(
            k in _TARGET_KEYS and isinstance(v, str) for k, v in target.items())):
        raise AmpError(MALFORMED, "delegation.target must map capability/action/resource to strings",
                       path="body.delegation.target")
    return Evidence(chain=links, proof=proof, target=target)


class ChainVerifier:
    """The delegation consumer (§2.2). One per daemon; holds the link cache."""

    def __init__(self, resolver: KeyResolver, revocations: RevocationChecker,
                 config: VerifierConfig = VerifierConfig()) -> None:
        self.resolver = resolver
        self.revocations = revocations
        self.config = config
        self._links: OrderedDict[bytes, Credential] = OrderedDict()
        # Validated chain fingerprints (RFC 005 §3, RFC 006): the chain's COSE
        # bytes → what steps 2, 3 (continuity), 4, 7 and 8 concluded. Those
        # steps depend on nothing but the bytes (and the keys, which a chain
        # cannot change), so a repeated chain skips them; validity, audience,
        # caller, revocation and target are decided for every request.
        self._chains: OrderedDict[tuple[bytes, ...], _Facts] = OrderedDict()
        self.verifications = 0  # signatures checked (the benchmark and tests read it)
        # The steps as bound methods, in STEPS' order (looked up once, not per
        # request), for a chain not in the cache.
        self._steps = [(step, getattr(self, f"_step_{step.name.lower()}")) for step, _what, _codes in STEPS]

    def evaluate(self, *, typ: int, evidence: Any, caller: str, target: Target | None, now_ms: int) -> Decision:
        """§6.1 for one request. Never raises for bad input: the decision
        carries the error (and an audit record either way). ``target=None``
        (``ampcap deleg show`` without a capability) skips step 9."""
        parsed: Evidence | None = None
        if typ == _INVOKE and self._chains:
            # A chain validated before (the usual case for an agent acting
            # for another): :meth:`_evaluate_known` runs the steps the cache
            # leaves, in STEPS' order, without the table's per-step dispatch.
            try:
                parsed = parse_evidence(evidence, self.config.max_chain_depth)
            except AmpError:
                pass  # step 2 below says what is wrong, with its code
            else:
                facts = self._chains.get(parsed.chain)
                if facts is not None:
                    return self._evaluate_known(parsed, facts, caller, target, now_ms)
        state = _Run(caller=caller, target=target, now_ms=now_ms, evidence=parsed)
        try:
            for step, run_step in self._steps:
                state.step = step
                run_step(state, typ, evidence)
        except AmpError as err:
            return state.decision(err)
        except Exception:  # a bug in a step must not let a request through
            return state.decision(AmpError(INTERNAL, "internal delegation policy failure"))
        return state.decision(None)

    def _evaluate_known(self, evidence: Evidence, facts: _Facts, caller: str, target: Target | None,
                        now_ms: int) -> Decision:
        """Steps 3 (the caller binding), 5, 6 and 9 for a chain found in the
        cache, in that order and with the table's codes; the others
        (``_DECIDED_BY_CACHE``, and step 1, checked by the caller) were
        concluded when these same bytes were first validated.
        tests/deleg/test_known_chain.py holds it to the table's decisions."""
        self._chains.move_to_end(evidence.chain)
        chain = facts.chain
        step = Step.CONTINUITY
        sources: tuple[str, ...] = ()
        error: AmpError | None = None
        try:
            _check_caller(chain, caller)
            step = Step.VALIDITY
            self._check_validity(chain, now_ms)
            step = Step.REVOCATION
            sources = self.revocations.check_chain(chain, now_ms)
            step = Step.TARGET
            if target is not None:
                target = _claimed_target(evidence, target)
                check_target(facts.effective, target)
            step = Step.DECISION
        except AmpError as err:
            error = err
        except Exception:  # a bug in a step must not let a request through
            error = AmpError(INTERNAL, "internal delegation policy failure")
        return Decision(allowed=error is None, error=error, caller=caller, target=target, evaluated_at=now_ms,
                        step=step, chain=chain, effective=facts.effective, sources=sources)

    # Each step reads and fills the run's state; the order is STEPS'.

    def _step_message_type(self, run: _Run, typ: int, evidence: Any) -> None:
        if typ != _INVOKE:  # §5.3, A.18
            raise AmpError(BAD_REQUEST, "'delegation' is only allowed on CAP_INVOKE", path="body.delegation")

    def _step_parse(self, run: _Run, typ: int, evidence: Any) -> None:
        try:
            self._parse(run, evidence)
        except AmpError as err:
            if err.code != MALFORMED:
                raise
            # RFC 004 §7.2 and its A.19/A.23: invalid evidence on a CAP_INVOKE
            # is 3004 (RFC 005 §8's 1001 is kept for DELEG_* bodies).
            raise AmpError(DELEGATION_INVALID, err.message, path=err.path) from None

    def _parse(self, run: _Run, evidence: Any) -> None:
        parsed = run.evidence or parse_evidence(evidence, self.config.max_chain_depth)
        run.evidence = parsed
        links: list[Credential] = []
        for i, raw in enumerate(parsed.chain):
            cached = self._links.get(raw)
            if cached is not None:
                self._links.move_to_end(raw)
                run.verified.add(i)
                links.append(cached)
                continue
            try:
                links.append(parse_credential(raw))
            except AmpError as err:
                raise AmpError(err.code, f"chain[{i}]: {err.message}",
                               path=f"body.delegation.chain[{i}]" + (f".{err.path}" if err.path else "")) from None
        run.chain = tuple(links)

    def _step_continuity(self, run: _Run, typ: int, evidence: Any) -> None:
        chain = run.chain
        for i in range(len(chain) - 1):
            if chain[i].delegate != chain[i + 1].delegator:
                raise AmpError(DELEGATION_INVALID, f"the chain breaks between links {i + 1} and {i + 2}")
        _check_caller(chain, run.caller)

    def _step_signatures(self, run: _Run, typ: int, evidence: Any) -> None:
        for i, cred in enumerate(run.chain):
            if i in run.verified:
                continue
            self.verifications += 1
            verify_sign1(cred.signed, self.resolver, signer=cred.delegator, what=f"chain[{i}]")
            self._remember(cred)

    def _step_validity(self, run: _Run, typ: int, evidence: Any) -> None:
        self._check_validity(run.chain, run.now_ms)

    def _check_validity(self, chain: tuple[Credential, ...], now: int) -> None:
        skew = self.config.max_skew_ms
        for i, cred in enumerate(chain):
            if now + skew < cred.not_before:
                raise AmpError(DELEGATION_INVALID, f"chain[{i}] is not valid yet")
            if now >= cred.expires_at:
                raise AmpError(DELEGATION_INVALID, f"chain[{i}] has expired")
            if cred.aud is not None and self.config.verifier_did not in cred.aud:
                raise AmpError(DELEGATION_INVALID, f"chain[{i}] is meant for another audience")

    def _step_revocation(self, run: _Run, typ: int, evidence: Any) -> None:
        run.sources = self.revocations.check_chain(run.chain, run.now_ms)

    def _step_subdelegation(self, run: _Run, typ: int, evidence: Any) -> None:
        n = len(run.chain)
        for i, cred in enumerate(run.chain):
            downstream = n - 1 - i
            if downstream and not cred.allow_subdelegation:
                raise AmpError(DELEGATION_INVALID, f"chain[{i}] does not allow subdelegation")
            if cred.max_chain_depth is not None and downstream > cred.max_chain_depth:
                raise AmpError(DELEGATION_INVALID, f"chain[{i}] allows at most {cred.max_chain_depth} "
                                                   f"further links")

    def _step_narrowing(self, run: _Run, typ: int, evidence: Any) -> None:
        run.effective = narrow([c.scope for c in run.chain], self.config.supported_constraints)
        if self.config.link_cache_entries and run.evidence is not None:
            self._chains[run.evidence.chain] = _Facts(chain=run.chain, effective=run.effective)
            while len(self._chains) > self.config.link_cache_entries:
                self._chains.popitem(last=False)

    def _step_target(self, run: _Run, typ: int, evidence: Any) -> None:
        assert run.effective is not None and run.evidence is not None
        if run.target is not None:
            run.target = _claimed_target(run.evidence, run.target)
            check_target(run.effective, run.target)

    def _step_decision(self, run: _Run, typ: int, evidence: Any) -> None:
        pass  # the audit record is built by _Run.decision

    def _remember(self, cred: Credential) -> None:
        if self.config.link_cache_entries == 0:
            return
        self._links[cred.raw] = cred
        while len(self._links) > self.config.link_cache_entries:
            self._links.popitem(last=False)


def _check_caller(chain: tuple[Credential, ...], caller: str) -> None:
    if chain[-1].delegate != caller:
        # §6.2 caller binding, A.6: the caller is not the one authorised.
        raise AmpError(UNAUTHORIZED, "the caller is not the last delegate of the chain")


def _claimed_target(evidence: Evidence, target: Target) -> Target:
    """The target step 9 evaluates: the request's, with the evidence's
    claimed action and resource (a claimed capability must be the same)."""
    claimed = evidence.target
    if not claimed:
        return target
    cap = claimed.get("capability")
    if cap is not None and cap not in (target.capability, target.capability_id):
        raise AmpError(DELEGATION_INVALID, "delegation.target names another capability")
    return Target(capability=target.capability, capability_id=target.capability_id,
                  action=claimed.get("action", target.action), resource=claimed.get("resource", target.resource))


class _Facts(msgspec.Struct, frozen=True):
    chain: tuple[Credential, ...]
    effective: EffectiveScope


class _Run(msgspec.Struct):
    caller: str
    target: Target | None
    now_ms: int
    step: Step = Step.MESSAGE_TYPE
    evidence: Evidence | None = None
    chain: tuple[Credential, ...] = ()
    verified: set[int] = msgspec.field(default_factory=set)
    effective: EffectiveScope | None = None
    sources: tuple[str, ...] = ()

    def decision(self, err: AmpError | None) -> Decision:
        return Decision(allowed=err is None, error=err, caller=self.caller, target=self.target,
                        evaluated_at=self.now_ms, step=self.step, chain=self.chain, effective=self.effective,
                        sources=self.sources)
