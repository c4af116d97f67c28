"""Which version serves an invoke (RFC 004 §6.3, §8): deterministic, and
always a concrete version the provider declares.

A pinned request (the ``id`` form, or ``version``) is served by that exact
version when it is declared. When it is not, the provider's §8 policy
decides:

* ``strict``: only the exact version; the descriptor advertises no range.
* ``range``: semver-range negotiation is allowed: the version advertises
  ``supported_ranges`` and is chosen through ``negotiate`` hints. A pinned
  request is still never served by another version (nothing adapts it).
* ``bridge``: the version also serves pinned requests for versions inside
  its ``supported_ranges`` (across majors too) through its explicit,
  deterministic adapter (``bridge = "module:function"``), which maps the
  requested version's params to its own; an optional second adapter maps
  the result back to the requested version's shape. Both directions log
  their input and output shapes. Without a documented bridge an
  incompatible version is 4003 (§8).

A request with ``negotiate`` hints picks, in order: the preferred version
if declared, the first declared acceptable one, then the highest declared
version inside ``range``. Otherwise 4003.

:func:`select` works on already-parsed fields (the executor's body parser
has applied ruling R6). :func:`negotiate` takes a raw CAP_INVOKE body and
applies R6 itself: ``id`` together with ``negotiate``, an ``id`` that
disagrees with ``capability``/``version``, or neither form → 4001.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..display import shown
from ..errors import AmpError, ReportedFailure
from .bodies import InvokeRequest, parse_invoke_body
from .manifest import Policy
from .semver import Range, Version

__all__ = ["Selection", "select", "select_for", "negotiate", "adapt_params", "adapt_result", "policy_of"]

log = logging.getLogger("ampcap.caps")

VERSION_MISMATCH, INTERNAL = 4003, 5001


@dataclass(frozen=True, slots=True)
class Selection:
    """The outcome: ``spec`` serves the request (a CapabilitySpec, or a bare
    Descriptor when negotiating over a peer's declarations)."""

    spec: Any
    requested: Version | None  # the pinned version asked for, when it differs from spec.version
    bridged: bool = False

    @property
    def capability_id(self) -> str:
        """The concrete ``name:version`` that runs (§6.3: always concrete)."""
        return self.spec.id


def policy_of(item: Any) -> Policy:
    """A spec's declared policy; a bare descriptor's follows §4.2 (absent
    ``supported_ranges``: exact version only)."""
    policy = getattr(item, "policy", None)
    if isinstance(policy, Policy):
        return policy
    return Policy.RANGE if _ranges_of(item) else Policy.STRICT


def _ranges_of(item: Any) -> tuple[Range, ...]:
    descriptor = getattr(item, "descriptor", item)
    return tuple(descriptor.supported_ranges or ())


def _version_of(item: Any) -> Version:
    return item.version


def select(specs: Sequence[Any], *, version: Version | None, preferred: Version | None = None,
           acceptable: Sequence[Version] = (), range_: Range | None = None) -> Selection:
    """``specs``: one name's declared versions, ascending (so lookups are
    bisections: the cost grows with log(versions), not with their number)."""
    if not specs:
        raise AmpError(VERSION_MISMATCH, "no version is declared")

    def declared(wanted: Version) -> Any:
        at = bisect.bisect_left(specs, wanted, key=_version_of)
        # Versions equal in precedence (build metadata only) sit together:
        # prefer the one whose text matches exactly, else the first.
        first = None
        while at < len(specs) and specs[at].version == wanted:
            if specs[at].version.build == wanted.build:
                return specs[at]
            first = first or specs[at]
            at += 1
        return first

    if version is not None:
        exact = declared(version)
        if exact is not None:
            return Selection(exact, None)
        for spec in reversed(specs):  # the highest bridge that covers it
            if policy_of(spec) is Policy.BRIDGE and getattr(spec, "bridge", None) is not None and \
                    any(r.contains(version) for r in _ranges_of(spec)):
                return Selection(spec, version, bridged=True)
        raise AmpError(VERSION_MISMATCH, f"version {shown(version)} of {specs[0].name} is not served "
                                         f"(declared: {_listing(specs)})")
    if preferred is not None and (hit := declared(preferred)) is not None:
        return Selection(hit, None)
    for wanted in acceptable:
        if (hit := declared(wanted)) is not None:
            return Selection(hit, None)
    if range_ is not None:
        # Walk down from the top of the range's slice: the highest version
        # inside wins (R14's pre-release rule is in contains()).
        lo, hi = range_.bounds(specs, _version_of)
        for i in range(hi - 1, lo - 1, -1):
            if range_.contains(specs[i].version):
                return Selection(specs[i], None)
    raise AmpError(VERSION_MISMATCH, f"no declared version of {specs[0].name} satisfies the negotiation hints "
                                     f"(declared: {_listing(specs)})")


def _listing(specs: Sequence[Any], most: int = 8) -> str:
    shown = [str(s.version) for s in specs[-most:]]
    return ("…, " if len(specs) > most else "") + ", ".join(shown)


def select_for(specs: Sequence[Any], request: InvokeRequest) -> Selection:
    """:func:`select` for a parsed CAP_INVOKE (its pinned version or hints)."""
    hints = request.negotiate
    return select(specs, version=request.version,
                  preferred=hints.preferred if hints else None,
                  acceptable=hints.acceptable if hints else (),
                  range_=hints.range if hints else None)


def negotiate(body: Mapping[str, Any], specs: Sequence[Any]) -> Selection:
    """Negotiate a raw CAP_INVOKE body against one name's declared versions
    (ascending). The body goes through the executor's own parser, so shape
    faults are 1001, R6 identity conflicts and bad semver text 4001, exactly
    as on the wire; no acceptable version is 4003. Which name ``specs``
    belong to (aliases, 4002) is the registry's business, settled before."""
    return select_for(specs, parse_invoke_body(body))


# ------------------------------------------------------------------ bridges


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(map(str, value))) + "}"
    return type(value).__name__


def _run_adapter(target: str, fn: Callable[..., Any], value: Any, requested: Version, what: str) -> Any:
    try:
        return fn(value, str(requested))
    except AmpError:
        raise
    except Exception as exc:
        log.debug("traceback of bridge %s (%s)", target, what, exc_info=True)
        raise ReportedFailure(INTERNAL, "capability bridge failed", topic=f"bridge {target}",
                              log_line=f"bridge {target} ({what}) raised {type(exc).__name__}: {shown(exc)}") from None


def adapt_params(selection: Selection, params: Any, resolve: Callable[[str], Callable[..., Any]]) -> Any:
    """Run the params adapter of a bridged selection, ``fn(params,
    requested_version) -> params`` (deterministic: a pure function of its
    arguments); 5001 if it fails. Unbridged selections pass through."""
    if not selection.bridged:
        return params
    spec = selection.spec
    assert spec.bridge is not None and selection.requested is not None
    adapted = _run_adapter(spec.bridge, resolve(spec.bridge), params, selection.requested, "params")
    log.info("bridge %s: %s:%s params %s -> %s params %s", spec.bridge, spec.name, shown(selection.requested),
             _shape(params), spec.id, _shape(adapted))
    return adapted


def adapt_result(selection: Selection, result: Any, resolve: Callable[[str], Callable[..., Any]]) -> Any:
    """Map a bridged invocation's result back to the requested version's
    shape with the spec's ``bridge_result`` adapter, ``fn(result,
    requested_version) -> result``; unchanged when there is none."""
    target = getattr(selection.spec, "bridge_result", None)
    if not selection.bridged or target is None:
        return result
    spec = selection.spec
    assert selection.requested is not None
    adapted = _run_adapter(target, resolve(target), result, selection.requested, "result")
    log.info("bridge %s: %s result %s -> %s:%s result %s", target, spec.id, _shape(result), spec.name,
             shown(selection.requested), _shape(adapted))
    return adapted
