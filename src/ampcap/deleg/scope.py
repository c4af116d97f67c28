"""The scope of a delegation (RFC 005 §4.2) and its narrowing (§6.2).

A scope has three dimensions, ``capabilities``, ``actions`` and
``resources``, each a set of exact strings, or absent. ``constraints`` are
key/value limits; this implementation understands none by default, so any
constraint key fails closed (3004) unless the verifier's configuration
names it as supported (and then it must still be equal along the chain).

Capability selectors are exact: a capability name (``org.example.review``)
or a capability id (``org.example.review:2.1.0``). A wildcard, a negation
or anything pattern-like is refused with 3004 (§4.2, A.9): the syntax check
is the capability name grammar itself, so nothing that is not a name or an
id gets through.

Narrowing: in the first link an absent dimension means *anything*; in a
later link an absent dimension inherits, a present one must be a subset of
what came before. A capability *name* covers every id of that name, so
``org.x.y:1.0.0`` narrows ``org.x.y``, never the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..caps.names import is_capability_name, parse_capability_id
from ..errors import AmpError

__all__ = ["ANY", "Scope", "EffectiveScope", "Target", "parse_scope", "narrow", "check_target"]

MALFORMED, DELEGATION_INVALID = 1001, 3004
DIMENSIONS = ("capabilities", "actions", "resources")
MAX_ENTRIES = 64  # per dimension: a scope is a short list, not a catalogue

ANY: frozenset[str] | None = None
"""An unrestricted dimension (``ANY_d`` of §6.2)."""


class Scope(msgspec.Struct, frozen=True, kw_only=True):
    """One link's scope as signed. ``None`` = the dimension is absent."""

    capabilities: frozenset[str] | None = None
    actions: frozenset[str] | None = None
    resources: frozenset[str] | None = None
    constraints: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in DIMENSIONS:
            value = getattr(self, name)
            if value is not None:
                out[name] = sorted(value)
        if self.constraints is not None:
            out["constraints"] = dict(self.constraints)
        return out


class EffectiveScope(msgspec.Struct, frozen=True, kw_only=True):
    """``E(n, d)`` for each dimension after narrowing; ``None`` = anything."""

    capabilities: frozenset[str] | None
    actions: frozenset[str] | None
    resources: frozenset[str] | None
    constraints: Mapping[str, Any]

    @property
    def names_ids(self) -> bool:
        """Does the capability dimension name a version (``name:x.y.z``)?"""
        return self.capabilities is not None and any(":" in s for s in self.capabilities)


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """What a request asks for (§2.1 authorization target)."""

    capability: str
    """The canonical capability name."""
    capability_id: str | None = None
    """``name:version`` once known (the by-id form, or after version resolution)."""
    action: str = "invoke"
    resource: str | None = None


def _selector_ok(text: str) -> bool:
    if is_capability_name(text):
        return True
    try:
        parse_capability_id(text)  # name:semver, nothing looser
    except AmpError:
        return False
    return True


def _dimension(raw: Any, name: str) -> frozenset[str]:
    if not isinstance(raw, list) or not raw:
        raise AmpError(MALFORMED, f"scope.{name} must be a non-empty array of strings", path=f"scope.{name}")
    if len(raw) > MAX_ENTRIES:
        raise AmpError(DELEGATION_INVALID, f"scope.{name} lists more than {MAX_ENTRIES} entries")
    for i, item in enumerate(raw):
        if not isinstance(item, str) or not item:
            raise AmpError(MALFORMED, f"scope.{name}[{i}] must be a non-empty string", path=f"scope.{name}[{i}]")
        if name == "capabilities" and not _selector_ok(item):
            # §4.2: wildcards, negation and patterns are not MTI (A.9).
            raise AmpError(DELEGATION_INVALID, "scope.capabilities: only exact capability names or ids are supported")
    return frozenset(raw)


def parse_scope(raw: Any) -> Scope:
    if not isinstance(raw, dict):
        raise AmpError(MALFORMED, "scope must be a map", path="scope")
    dims: dict[str, frozenset[str] | None] = {}
    for name in DIMENSIONS:
        dims[name] = _dimension(raw[name], name) if name in raw else None
    constraints = raw.get("constraints")
    if constraints is not None:
        if not isinstance(constraints, dict) or not all(isinstance(k, str) for k in constraints):
            raise AmpError(MALFORMED, "scope.constraints must be a map with text keys", path="scope.constraints")
    if all(v is None for v in dims.values()):
        raise AmpError(DELEGATION_INVALID, "scope names none of capabilities, actions, resources")
    return Scope(capabilities=dims["capabilities"], actions=dims["actions"], resources=dims["resources"],
                 constraints=constraints)


def _covers(granted: frozenset[str], selector: str) -> bool:
    """Is capability selector ``selector`` within ``granted``? An id is
    within its own name."""
    if selector in granted:
        return True
    name, colon, _ = selector.partition(":")
    return bool(colon) and name in granted


def _subset(dimension: str, inner: frozenset[str], outer: frozenset[str]) -> bool:
    if dimension == "capabilities":
        return all(_covers(outer, s) for s in inner)
    return inner <= outer


def narrow(scopes: list[Scope], supported_constraints: frozenset[str] = frozenset()) -> EffectiveScope:
    """§6.2 over the links in order; 3004 when a link widens a dimension,
    or carries a constraint this verifier does not support (§4.2, §10)."""
    effective: dict[str, frozenset[str] | None] = dict.fromkeys(DIMENSIONS, ANY)
    constraints: dict[str, Any] = {}
    for i, scope in enumerate(scopes):
        for name in DIMENSIONS:
            value = getattr(scope, name)
            if value is None:
                continue  # first link: ANY; later links: inherit
            before = effective[name]
            if before is not None and not _subset(name, value, before):
                raise AmpError(DELEGATION_INVALID, f"link {i + 1} widens scope.{name}")
            effective[name] = value
        for key, value in (scope.constraints or {}).items():
            if key not in supported_constraints:
                raise AmpError(DELEGATION_INVALID, "the scope carries a constraint this verifier does not support")
            if key in constraints and constraints[key] != value:
                raise AmpError(DELEGATION_INVALID, f"link {i + 1} changes a constraint")
            constraints[key] = value
    return EffectiveScope(capabilities=effective["capabilities"], actions=effective["actions"],
                          resources=effective["resources"], constraints=constraints)


def check_target(scope: EffectiveScope, target: Target) -> None:
    """§6.1 step 9: 3004 unless ``target`` is inside ``scope``.

    With ``capability_id`` unknown (a by-name invoke before version
    resolution), a scope naming only ids of that capability passes here
    and must be checked again once the version is chosen."""
    caps = scope.capabilities
    if caps is not None:
        if target.capability_id is not None:
            ok = target.capability_id in caps or target.capability in caps
        else:
            ok = target.capability in caps or any(s.partition(":")[0] == target.capability for s in caps)
        if not ok:
            raise AmpError(DELEGATION_INVALID, "the capability is outside the delegated scope")
    if scope.actions is not None and target.action not in scope.actions:
        raise AmpError(DELEGATION_INVALID, "the action is outside the delegated scope")
    if scope.resources is not None and (target.resource is None or target.resource not in scope.resources):
        raise AmpError(DELEGATION_INVALID, "the resource is outside the delegated scope")
