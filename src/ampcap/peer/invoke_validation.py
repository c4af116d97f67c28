"""The RFC 004 §7.2 validation order of a CAP_INVOKE, steps 1 to 7, and
nowhere else: body shape, the coarse policy gate, delegation (RFC 005
§6.1), identity resolution held back until the capability-scoped ACL has
passed (ruling R10: a denied caller learns nothing of what exists), version
compatibility, then the input schema.

A base class of :class:`~ampcap.peer.executor.Executor` (so the hot path
pays no extra call); what it reads of the executor is named in
:class:`_Host`. Nothing here imports the executor.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol

from ..caps.bodies import InvokeRequest, Resolved, parse_invoke_body
from ..deleg.chain import ChainVerifier, Decision
from ..errors import AmpError
from ..wire.envelope import Envelope
from .admission import has_ext_delegation as _has_ext_delegation
from .caller_checks import CallerChecks
from .caller_checks import denied as _denied
from .delegated import DelegationDenied, check_negotiated, decide
from .limits import InFlightLimits
from .policy import Policy

__all__ = ["InvokeValidation", "CapabilityResolver", "ParamsChecker"]

DELEGATION_INVALID = 3004


class _Deferred:
    """Step 4's outcome, held until step 5 allows revealing it."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: AmpError | None = None) -> None:
        self.value, self.error = value, error


class CapabilityResolver(Protocol):
    """Steps 4 and 6 (``caps/negotiate.py``), kept apart so the ACL can sit between them."""

    def canonical_name(self, name: str) -> str:
        """Alias or legacy ``type`` → canonical name; unknown names unchanged (never raises)."""
        ...

    def resolve_identity(self, request: InvokeRequest) -> Any:
        """Step 4: find the capability; ``AmpError(4002)`` when unknown."""
        ...

    def check_version(self, target: Any, request: InvokeRequest) -> Resolved:
        """Step 6: pick a compatible version (strict/range/bridge); ``AmpError(4003)``."""
        ...


class ParamsChecker(Protocol):
    """Step 7 (``caps.params.ParamsValidator``): 4004, or 5002 for a bad artifact."""

    def validate_params(self, descriptor: Any, params: Any) -> None: ...


class _Host(Protocol):
    """What the validation reads of the executor it is part of."""

    delegation: ChainVerifier | None
    _policy: Policy
    _callers: CallerChecks
    _limits: InFlightLimits
    _resolver: CapabilityResolver
    _params: ParamsChecker

    @staticmethod
    def _defer(step: Any, request: InvokeRequest) -> _Deferred: ...


class InvokeValidation:
    """Steps 1 to 7 of RFC 004 §7.2 (see the module docstring)."""

    def _validate(self: _Host, env: Envelope, body: Any, conn: Hashable, now_ms: int,
                  count_rate: bool = True) -> tuple[InvokeRequest, Resolved, Decision | None]:
        """RFC 004 §7.2, in order. The first failing step's AmpError escapes
        (a delegation denial as :class:`~ampcap.peer.delegated.DelegationDenied`,
        with its audit)."""
        # 1. Body shape and required fields: 1001; identity-form conflicts: 4001 (R6).
        request = parse_invoke_body(body)
        # 2. Coarse policy, without knowing the capability: 3001, 3005, 5004.
        #    A caller the gate refuses may still come in on a delegator's
        #    authority (docs/policy.md): its refusal waits for step 3.
        gate_refused = not self._policy.caller_allowed(env.sender)
        if gate_refused and not (request.has_delegation and self.delegation is not None
                                 and self._policy.admits_delegates()):
            raise _denied()
        if count_rate:
            self._callers.check_rate(env.sender, now_ms)
        self._limits.check(conn)
        # 3. Delegation (RFC 005 §6.1): only signed body evidence counts;
        #    evidence in ext is refused whatever the body holds (A.14).
        if _has_ext_delegation(env):
            raise AmpError(DELEGATION_INVALID, "delegation evidence outside the signed body is not accepted")
        name = self._resolver.canonical_name(request.name)
        decision: Decision | None = None
        if request.has_delegation:
            try:
                decision = decide(self.delegation, env, body, request, name, now_ms, _denied)
            except DelegationDenied as denied:
                if gate_refused:  # the gate's refusal, not the chain's verdict, is what it may learn
                    raise DelegationDenied(_denied(), denied.decision) from None
                raise
            if gate_refused and not self._policy.admits_delegate(env.sender, decision.delegator):
                raise _denied()
        # 4. Capability identity resolution (aliases, legacy type → canonical): 4002,
        #    held back until step 5 passed so a denied caller learns nothing (R10).
        found = self._defer(self._resolver.resolve_identity, request)
        # 5. Capability-scoped ACL on the canonical requested name: 3001; an
        #    unknown name is 3001 too for a caller some rule refuses (R10). A
        #    delegated invoke may use what its delegator may (docs/policy.md).
        if not self._policy.capability_allowed(env.sender, name,
                                               delegator=decision.delegator if decision is not None else None):
            raise _denied()
        if found.error is not None:
            raise self._callers.as_seen_by(env.sender, found.error)
        target = found.value
        # 6. Version compatibility (strict / range / bridge): 4003.
        resolved = self._resolver.check_version(target, request)
        if decision is not None:  # a scope naming ids must name the version chosen (peer/delegated.py)
            check_negotiated(decision, name, str(resolved.descriptor.id))
        # 7. Input schema: 4004; a missing or corrupt offline artifact: 5002.
        self._params.validate_params(resolved.descriptor, resolved.params)
        return request, resolved, decision

    @staticmethod
    def _defer(step: Any, request: InvokeRequest) -> _Deferred:
        try:
            return _Deferred(value=step(request))
        except AmpError as err:
            return _Deferred(error=err)
