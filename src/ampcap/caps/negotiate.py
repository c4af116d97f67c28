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
  requested version's params to its own; the adapter's input and output
  shapes are logged. Without a documented bridge an incompatible version is
  4003 (§8).

A request with ``negotiate`` hints picks, in order: the preferred version
if declared, the first declared acceptable one, then the highest declared
version inside ``range``. Otherwise 4003. (The R6 conflicts between ``id``
and the other fields are the body parser's 4001, before this runs.)
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AmpError
from .manifest import CapabilitySpec, Policy
from .semver import Version

__all__ = ["Selection", "select", "adapt_params"]

log = logging.getLogger("ampcap.caps")

VERSION_MISMATCH = 4003


@dataclass(frozen=True, slots=True)
class Selection:
    spec: CapabilitySpec
    requested: Version | None  # the pinned version asked for, when it differs from spec.version
    bridged: bool = False


def select(specs: Sequence[CapabilitySpec], *, version: Version | None, preferred: Version | None = None,
           acceptable: Sequence[Version] = (), range_: Any = None) -> Selection:
    """``specs``: one name's declared versions, ascending (so lookups are
    bisections: the cost grows with log(versions), not with their number)."""

    def declared(wanted: Version) -> CapabilitySpec | None:
        at = bisect.bisect_left(specs, wanted, key=_version_of)
        return specs[at] if at < len(specs) and specs[at].version == wanted else None

    if version is not None:
        exact = declared(version)
        if exact is not None:
            return Selection(exact, None)
        for spec in reversed(specs):  # the highest bridge that covers it
            if spec.policy is Policy.BRIDGE and spec.bridge is not None and \
                    any(r.contains(version) for r in spec.descriptor.supported_ranges or ()):
                return Selection(spec, version, bridged=True)
        raise AmpError(VERSION_MISMATCH, f"version {version} of {specs[0].name} is not served "
                                         f"(declared: {', '.join(str(s.version) for s in specs)})")
    if preferred is not None and (hit := declared(preferred)) is not None:
        return Selection(hit, None)
    for wanted in acceptable:
        if (hit := declared(wanted)) is not None:
            return Selection(hit, None)
    if range_ is not None:
        # Bisect to the range's bounds, then walk down from the top: the
        # highest version inside wins (R14's pre-release rule is in contains()).
        lo, hi = 0, len(specs)
        for comp in range_.comparators:
            if comp.op in ("<", "<="):
                cut = bisect.bisect_left if comp.op == "<" else bisect.bisect_right
                hi = min(hi, cut(specs, comp.version, key=_version_of))
            elif comp.op in (">", ">="):
                cut = bisect.bisect_right if comp.op == ">" else bisect.bisect_left
                lo = max(lo, cut(specs, comp.version, key=_version_of))
        for i in range(hi - 1, lo - 1, -1):
            if range_.contains(specs[i].version):
                return Selection(specs[i], None)
    raise AmpError(VERSION_MISMATCH, f"no declared version of {specs[0].name} satisfies the negotiation hints")


def _version_of(spec: CapabilitySpec) -> Version:
    return spec.version


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(map(str, value))) + "}"
    return type(value).__name__


def adapt_params(selection: Selection, params: Any, resolve: Callable[[str], Callable[..., Any]]) -> Any:
    """Run the bridge adapter of a bridged selection (deterministic: a pure
    function of the params and the requested version); 5001 if it fails."""
    if not selection.bridged:
        return params
    spec = selection.spec
    assert spec.bridge is not None and selection.requested is not None
    try:
        adapted = resolve(spec.bridge)(params, str(selection.requested))
    except AmpError:
        raise
    except Exception:
        log.error("bridge %s for %s raised", spec.bridge, spec.id, exc_info=True)
        raise AmpError(5001, "capability bridge failed") from None
    log.info("bridge %s: %s:%s params %s -> %s params %s", spec.bridge, spec.name, selection.requested,
             _shape(params), spec.id, _shape(adapted))
    return adapted
