"""Who may ask this daemon for what, and how often (RFC 004 §7.2 steps 2 and 5).

A policy is a small TOML file (format and example in ``docs/policy.md``):

* ``default = "allow" | "deny"`` for callers named in neither list;
* top-level ``allow`` / ``deny``: DID patterns; ``deny`` wins;
* ``[[capability]]`` tables: ``match`` (a name or a namespace glob such as
  ``org.ampcap.demo.*``) with their own ``allow`` / ``deny`` lists; the
  *first* table whose ``match`` fits the capability name decides (firewall
  style, so the file reads top to bottom);
* ``[rate_limit]``: a token bucket per sender (``rate`` per second, ``burst``);
* ``delegators`` (top level and per ``[[capability]]``): grants by delegator
  for delegated invokes (RFC 005): a caller with a verified chain from a
  listed DID is admitted, as if it were listed itself (``deny`` still wins).

Patterns are exact strings, or contain ``*`` which matches any run of
characters (``did:web:example.com:*``). Nothing else is special, so DIDs
with ``[`` or ``?`` are matched literally, unlike ``fnmatch``.

:func:`parse_policy` takes the parsed TOML (reading the file is
:func:`ampcap.files.policy.load_policy`'s job) and never half-succeeds:
every problem is collected and reported as one ``AmpError(4001)`` whose
message names the file and the key (``policy.toml: capability[1].allow[0]:
expected a string``).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import AmpError

__all__ = [
    "Pattern",
    "CapabilityRule",
    "RateLimit",
    "Policy",
    "RateLimiter",
    "parse_policy",
    "ALLOW_ALL",
]

_BAD_CONFIG = 4001


@dataclass(frozen=True, slots=True)
class Pattern:
    """An exact string, or a glob where ``*`` matches any run of characters."""

    text: str
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if "*" in self.text:
            parts = (re.escape(p) for p in self.text.split("*"))
            object.__setattr__(self, "_regex", re.compile(".*".join(parts), re.DOTALL))

    def matches(self, value: str) -> bool:
        if self._regex is None:
            return value == self.text
        return self._regex.fullmatch(value) is not None


def _any(patterns: tuple[Pattern, ...], value: str) -> bool:
    return any(p.matches(value) for p in patterns)


class CapabilityRule(msgspec.Struct, frozen=True, kw_only=True):
    """Capability-scoped ACL: who may query or invoke the matching names.

    ``allow=None`` means "no allow list" (everyone not denied may);
    an empty allow list means nobody may.
    """

    match: Pattern
    allow: tuple[Pattern, ...] | None = None
    deny: tuple[Pattern, ...] = ()
    delegators: tuple[Pattern, ...] = ()
    """A delegated invoke (RFC 005) whose verified chain starts at one of
    these DIDs may use the matching capabilities too (``deny`` still wins)."""

    def permits(self, did: str) -> bool:
        if _any(self.deny, did):
            return False
        return self.allow is None or _any(self.allow, did)

    def permits_delegated(self, did: str, delegator: str) -> bool:
        return self.permits(did) or (not _any(self.deny, did) and _any(self.delegators, delegator))


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    rate_per_s: float
    burst: int
    max_senders: int = 10_000  # buckets remembered; see RateLimiter


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    """An immutable, parsed policy. Decisions are pure functions of it."""

    default_allow: bool = True
    allow: tuple[Pattern, ...] = ()
    deny: tuple[Pattern, ...] = ()
    capabilities: tuple[CapabilityRule, ...] = ()
    rate_limit: RateLimit | None = None
    source: str = "<default>"
    delegators: tuple[Pattern, ...] = ()
    """Callers the gate would refuse are admitted when they present a valid
    delegation chain from one of these DIDs (and are not in ``deny``)."""

    def caller_allowed(self, did: str) -> bool:
        """Step 2, coarse: may this DID talk to us at all?"""
        if _any(self.deny, did):
            return False
        if _any(self.allow, did):
            return True
        return self.default_allow

    def capability_allowed(self, did: str, name: str, *, delegator: str | None = None) -> bool:
        """Step 5: may this DID use capability ``name`` (canonical form)?
        ``delegator``: the invoke is delegated, and its chain (verified)
        starts at this DID.

        Decided on the *name* alone, so the answer cannot depend on whether
        the capability or the version exists (ruling R10).
        """
        for rule in self.capabilities:
            if rule.match.matches(name):
                return rule.permits(did) if delegator is None else rule.permits_delegated(did, delegator)
        return True

    def admits_delegates(self) -> bool:
        """Could a caller the gate refuses come in on a delegator's authority?"""
        return bool(self.delegators)

    def admits_delegate(self, did: str, delegator: str | None) -> bool:
        """Step 2, deferred past step 3: a refused caller with a verified chain from a listed delegator."""
        return delegator is not None and not _any(self.deny, did) and _any(self.delegators, delegator)

    def restricts(self, did: str) -> bool:
        """Does some capability rule refuse this DID? Such a caller is told
        3001, not 4002, for a name that resolves to nothing: an alias or a
        legacy ``type`` carries no namespace, so "unknown" versus "denied"
        would tell it which aliases lead into a namespace it may not use
        (ruling R10)."""
        return any(not rule.permits(did) for rule in self.capabilities)

    def new_rate_limiter(self) -> RateLimiter | None:
        return RateLimiter(self.rate_limit) if self.rate_limit is not None else None


ALLOW_ALL = Policy()


class RateLimiter:
    """Token bucket per sender DID, driven by ``now_ms`` (no clock).

    Memory is bounded by ``max_senders``: the least recently seen sender's
    bucket is forgotten first. A forgotten sender starts again with a full
    bucket, which is what a new sender gets anyway; since did:key identities
    cost nothing to mint, per-sender state can never stop a determined
    flooder on its own. That is what the in-flight limits are for.
    """

    def __init__(self, spec: RateLimit) -> None:
        self.spec = spec
        # did -> (tokens, last refill time)
        self._buckets: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, did: str, now_ms: int) -> bool:
        """Take one token for ``did``; False when its bucket is empty (→ 3005)."""
        spec = self.spec
        tokens, last = self._buckets.pop(did, (float(spec.burst), now_ms))
        # A clock that steps backwards must not mint tokens or go negative.
        elapsed = max(0, now_ms - last)
        tokens = min(float(spec.burst), tokens + elapsed * spec.rate_per_s / 1000.0)
        ok = tokens >= 1.0
        if ok:
            tokens -= 1.0
        self._buckets[did] = (tokens, max(now_ms, last))
        while len(self._buckets) > spec.max_senders:
            self._buckets.popitem(last=False)
        return ok


# ----------------------------------------------------------------- loading


class _Problems:
    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.source}: {key}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            more = f" (and {len(self.items) - 1} more)" if len(self.items) > 1 else ""
            raise AmpError(_BAD_CONFIG, self.items[0] + more, details=list(self.items))


_TOP_KEYS = frozenset({"default", "allow", "deny", "delegators", "capability", "rate_limit"})
_RULE_KEYS = frozenset({"match", "allow", "deny", "delegators"})
_RATE_KEYS = frozenset({"rate", "burst", "max_senders"})


def _patterns(value: Any, key: str, out: _Problems) -> tuple[Pattern, ...]:
    if not isinstance(value, list):
        out.add(key, "expected a list of strings")
        return ()
    result = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            out.add(f"{key}[{i}]", "expected a non-empty string")
        else:
            result.append(Pattern(item))
    return tuple(result)


def _unknown(table: Mapping[str, Any], known: frozenset[str], prefix: str, out: _Problems) -> None:
    for k in table:
        if k not in known:
            # A typo such as "alow" would otherwise silently open the door.
            out.add(f"{prefix}{k}", f"unknown key (expected one of {', '.join(sorted(known))})")


def _rule(i: int, table: Any, out: _Problems) -> CapabilityRule | None:
    where = f"capability[{i}]"
    if not isinstance(table, dict):
        out.add(where, "expected a table")
        return None
    _unknown(table, _RULE_KEYS, where + ".", out)
    match = table.get("match")
    if not isinstance(match, str) or not match:
        out.add(where + ".match", "required: a capability name or a namespace glob like org.example.*")
        return None
    allow = _patterns(table["allow"], where + ".allow", out) if "allow" in table else None
    deny = _patterns(table.get("deny", []), where + ".deny", out)
    delegators = _patterns(table.get("delegators", []), where + ".delegators", out)
    return CapabilityRule(match=Pattern(match), allow=allow, deny=deny, delegators=delegators)


def _rate(table: Any, out: _Problems) -> RateLimit | None:
    if not isinstance(table, dict):
        out.add("rate_limit", "expected a table")
        return None
    _unknown(table, _RATE_KEYS, "rate_limit.", out)
    rate = table.get("rate")
    burst = table.get("burst")
    max_senders = table.get("max_senders", 10_000)
    ok = True
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        out.add("rate_limit.rate", "required: a positive number of requests per second")
        ok = False
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        out.add("rate_limit.burst", "required: a positive integer")
        ok = False
    if isinstance(max_senders, bool) or not isinstance(max_senders, int) or max_senders < 1:
        out.add("rate_limit.max_senders", "expected a positive integer")
        ok = False
    return RateLimit(rate_per_s=float(rate), burst=burst, max_senders=max_senders) if ok else None  # type: ignore[arg-type]


def parse_policy(data: Mapping[str, Any], *, source: str = "<data>") -> Policy:
    """Build a :class:`Policy` from parsed TOML; ``AmpError(4001)`` lists every problem."""
    out = _Problems(source)
    _unknown(data, _TOP_KEYS, "", out)
    default = data.get("default", "allow")
    if default not in ("allow", "deny"):
        out.add("default", 'expected "allow" or "deny"')
    allow = _patterns(data.get("allow", []), "allow", out)
    deny = _patterns(data.get("deny", []), "deny", out)
    delegators = _patterns(data.get("delegators", []), "delegators", out)
    rules_raw = data.get("capability", [])
    rules: list[CapabilityRule] = []
    if not isinstance(rules_raw, list):
        out.add("capability", "expected an array of tables ([[capability]])")
    else:
        for i, table in enumerate(rules_raw):
            rule = _rule(i, table, out)
            if rule is not None:
                rules.append(rule)
    rate = _rate(data["rate_limit"], out) if "rate_limit" in data else None
    out.raise_if_any()
    return Policy(default_allow=default == "allow", allow=allow, deny=deny, capabilities=tuple(rules),
                  rate_limit=rate, source=source, delegators=delegators)
