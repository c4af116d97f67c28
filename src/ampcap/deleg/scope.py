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

__all__ = ["ANY", "Scope", "EffectiveScope", "Target", "scope_from_wire", "narrow", "check_target"]

DELEGATION_INVALID = 3004
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
    names_ids: bool = False
    """Does the capability dimension name a version (``name:x.y.z``)? Worked
    out once by :func:`narrow`: the executor asks for every delegated invoke,
    and a cached chain's scope is the same object each time."""


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """What a request asks for (§2.1 authorization target)."""

    capability: str
    """The canonical capability name."""
    capability_id: str | None = None
    """``name:version`` once known (the by-id form, or after version resolution)."""
    action: str = "invoke"
    resource: str | None = None


def _check_selector(text: str) -> bool:
    if is_capability_name(text):
        return True
    try:
        parse_capability_id(text)  # name:semver, nothing looser
    except AmpError:
        return False
    return True


_SELECTORS: dict[str, bool] = {}
_SELECTORS_SIZE = 4096


def _selector_ok(text: str) -> bool:
    """:func:`_check_selector`, remembered: the name and SemVer grammars cost
    more than the rest of a scope's parse, and scopes repeat the same few
    capabilities. Bounded (cleared when full); entries are at most 64 per
    dimension and short, since a credential is at most 8 KiB."""
    known = _SELECTORS.get(text)
    if known is None:
        known = _check_selector(text)
        if len(_SELECTORS) >= _SELECTORS_SIZE:
            _SELECTORS.clear()
        _SELECTORS[text] = known
    return known


def _dimension(entries: list[str] | None, name: str) -> frozenset[str] | None:
    """A dimension as signed (a non-empty list of non-empty strings: the
    payload's types said so) → its set; 3004 past the bound or, for
    capabilities, for anything but an exact name or id."""
    if entries is None:
        return None
    if len(entries) > MAX_ENTRIES:
        raise AmpError(DELEGATION_INVALID, f"scope.{name} lists more than {MAX_ENTRIES} entries")
    if name == "capabilities":
        for item in entries:
            if not _selector_ok(item):
                # §4.2: wildcards, negation and patterns are not MTI (A.9).
                raise AmpError(DELEGATION_INVALID,
                               "scope.capabilities: only exact capability names or ids are supported")
    return frozenset(entries)


def scope_from_wire(capabilities: list[str] | None, actions: list[str] | None, resources: list[str] | None,
                    constraints: dict[str, Any] | None) -> Scope:
    """A link's :class:`Scope` from its payload fields, whose types are
    already checked (:mod:`.credential`): the bounds and selector rules."""
    if capabilities is None and actions is None and resources is None:
        raise AmpError(DELEGATION_INVALID, "scope names none of capabilities, actions, resources")
    return Scope(capabilities=_dimension(capabilities, "capabilities"), actions=_dimension(actions, "actions"),
                 resources=_dimension(resources, "resources"), constraints=constraints)


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
    capabilities = actions = resources = ANY
    constraints: dict[str, Any] = {}
    for i, scope in enumerate(scopes):
        # Each dimension: absent = anything (first link) or inherited (later
        # links); present = a subset of what came before. A plain subset
        # settles the usual case; an id under a granted name needs _covers.
        value = scope.capabilities
        if value is not None:
            if capabilities is not None and not value <= capabilities and not _subset(
                    "capabilities", value, capabilities):
                raise AmpError(DELEGATION_INVALID, f"link {i + 1} widens scope.capabilities")
            capabilities = value
        value = scope.actions
        if value is not None:
            if actions is not None and not value <= actions:
                raise AmpError(DELEGATION_INVALID, f"link {i + 1} widens scope.actions")
            actions = value
        value = scope.resources
        if value is not None:
            if resources is not None and not value <= resources:
                raise AmpError(DELEGATION_INVALID, f"link {i + 1} widens scope.resources")
            resources = value
        if scope.constraints:
            for key, item in scope.constraints.items():
                if key not in supported_constraints:
                    raise AmpError(DELEGATION_INVALID,
                                   "the scope carries a constraint this verifier does not support")
                if key in constraints and constraints[key] != item:
                    raise AmpError(DELEGATION_INVALID, f"link {i + 1} changes a constraint")
                constraints[key] = item
    return EffectiveScope(capabilities=capabilities, actions=actions, resources=resources, constraints=constraints,
                          names_ids=capabilities is not None and any(":" in s for s in capabilities))


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
