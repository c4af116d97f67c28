"""The compiled form of CDDL's groups: maps and arrays (RFC 8610 §3.5, §3.4).

The other type nodes (leaf types, choices, tags, references) and the two
ways into every node (``check`` and ``explain``) are in :mod:`.nodes`;
these are the nodes whose members are themselves groups of entries, with
the matching that goes with them: a map's members by key, with choices of
groups and computed keys, and an array's entries in order with their
occurrence bounds.
"""

from __future__ import annotations

from typing import Any, Sequence

from .nodes import Check, Findings, TypeNode, error_count, is_array, literal_text
from .violations import EXTENSION_KEY, Violation, describe_found, join_index, join_key

__all__ = ["Member", "Computed", "Alternatives", "MapType", "ArrayType"]


class Member:
    """``key: type`` / ``"key" => type`` with a literal key."""

    __slots__ = ("key", "vtype", "required")

    def __init__(self, key: Any, vtype: TypeNode, required: bool) -> None:
        self.key, self.vtype, self.required = key, vtype, required


class Computed:
    """``* ktype => vtype``: any number (within bounds) of keys of a type."""

    __slots__ = ("ktype", "vtype", "low", "high")

    def __init__(self, ktype: TypeNode, vtype: TypeNode, low: int, high: float) -> None:
        self.ktype, self.vtype, self.low, self.high = ktype, vtype, low, high


class Alternatives:
    """A parenthesised group inside a map, with its ``//`` alternatives.
    ``optional`` groups are all-or-nothing: absent when none of their keys
    is present, otherwise matched in full."""

    __slots__ = ("alts", "optional", "keys")

    def __init__(self, alts: Sequence[Sequence[Any]], optional: bool) -> None:
        self.alts = tuple(tuple(a) for a in alts)
        self.optional = optional
        self.keys = frozenset(_literal_keys(self.alts))


def _literal_keys(alts: Sequence[Sequence[Any]]) -> list[Any]:
    keys: list[Any] = []
    for seq in alts:
        for e in seq:
            if isinstance(e, Member):
                keys.append(e.key)
            elif isinstance(e, Alternatives):
                keys.extend(e.keys)
    return keys


def _match_seq(seq: Sequence[Any], d: dict, consumed: set, path: str, out: Findings | None) -> bool:
    ok = True
    for e in seq:
        if e.__class__ is Member:
            k = e.key
            if k in d:
                consumed.add(k)
                if out is None:
                    if not e.vtype.check(d[k]):
                        return False
                elif not e.vtype.explain(d[k], join_key(path, k), out):
                    ok = False
            elif e.required:
                if out is None:
                    return False
                out.append(Violation(join_key(path, k), f"key {literal_text(k)}", "absent"))
                ok = False
        else:  # Alternatives
            if e.optional and not any(k in d for k in e.keys):
                continue
            if not _match_alts(e.alts, d, consumed, path, out):
                if out is None:
                    return False
                ok = False
    return ok


def _match_alts(alts: tuple, d: dict, consumed: set, path: str, out: Findings | None) -> bool:
    if len(alts) == 1:
        return _match_seq(alts[0], d, consumed, path, out)
    # Try each alternative on a copy; keep the one that matches and accounts
    # for the most keys (fewest left over as extension keys).
    best: tuple[set, Findings] | None = None
    failures: list[tuple[set, Findings]] = []
    for seq in alts:
        taken = set(consumed)
        trial: Findings | None = None if out is None else []
        if _match_seq(seq, d, taken, path, trial):
            if best is None or len(taken) > len(best[0]):
                best = (taken, trial or [])
        elif out is not None:
            failures.append((taken, trial or []))
    if best is not None:
        consumed |= best[0]
        if out is not None:
            out.extend(best[1])
        return True
    if out is None:
        return False
    if all(f and all(v.found == "absent" for v in f) for _, f in failures):
        # Nothing of any alternative is there: one finding naming them all.
        wanted = " or ".join(f[0].expected for _, f in failures)
        out.append(Violation(failures[0][1][0].path, wanted, "absent"))
        return False
    taken, trial = max(failures, key=lambda f: (len(f[0]), -error_count(f[1])))
    consumed |= taken
    out.extend(trial)
    return False


_MAX_EXPANSIONS = 16


def _expand(seq: Sequence[Any]) -> list[list[Member]] | None:
    """Every flat member list a group sequence can stand for: each
    ``Alternatives`` contributes one of its alternatives (or, when optional,
    nothing at all, since optional groups are all-or-nothing). ``None`` when
    there would be more than ``_MAX_EXPANSIONS``."""
    results: list[list[Member]] = [[]]
    for e in seq:
        if e.__class__ is Member:
            results = [r + [e] for r in results]
            continue
        options: list[list[Member]] = [[]] if e.optional else []
        for alt in e.alts:
            sub = _expand(alt)
            if sub is None:
                return None
            options += sub
        results = [r + o for r in results for o in options]
        if len(results) > _MAX_EXPANSIONS:
            return None
    return results


def _flat_map_check(members: Sequence[Member]) -> Check:
    """One pass over a map's entries against tables of its literal keys:
    every key known, every value of its type, every required key seen."""
    required = {e.key: e.vtype.check for e in members if e.required}
    optional = {e.key: e.vtype.check for e in members if not e.required}
    n_required = len(required)
    req_get, opt_get = required.get, optional.get

    def check(v: Any) -> bool:
        if v.__class__ is not dict and not isinstance(v, dict):
            return False
        seen = 0
        for k, x in v.items():
            c = req_get(k)
            if c is None:
                c = opt_get(k)
                if c is None:
                    return False
            else:
                seen += 1
            if not c(x):
                return False
        return seen == n_required

    return check


class MapType(TypeNode):
    """``{ group }``. ``alts`` are the top-level ``//`` alternatives, each a
    sequence of :class:`Member` / :class:`Alternatives`; ``computed`` are
    the ``* k => v`` entries, matched against whatever keys are left."""

    __slots__ = ("alts", "computed")

    def __init__(self, alts: Sequence[Sequence[Any]], computed: Sequence[Computed], desc: str = "map") -> None:
        self.alts = tuple(tuple(a) for a in alts)
        self.computed = tuple(computed)
        self.desc = desc
        self.check = self._build_check()

    def _build_check(self) -> Check:
        if self.computed:
            if len(self.alts) == 1 and not self.alts[0] and len(self.computed) == 1:
                return self._only_computed_check(self.computed[0])
            return self._general_check
        # Without computed entries a map matches iff it matches one of the
        # group's flat expansions exactly (every `//` choice and optional
        # group spelled out), so the fast path is one pass per expansion
        # instead of the backtracking walk. E.g. cap-invoke-by-name becomes
        # four flat maps: (capability [+ type] | type) x (version | negotiate).
        expansions: list[list[Member]] = []
        for alt in self.alts:
            flat = _expand(alt)
            if flat is None or len(expansions) + len(flat) > _MAX_EXPANSIONS:
                return self._general_check
            expansions += flat
        if any(len({m.key for m in members}) != len(members) for members in expansions):
            return self._general_check  # a key in two places: only the walk resolves that
        checks = [_flat_map_check(members) for members in expansions]
        if len(checks) == 1:
            return checks[0]
        return lambda v: any(c(v) for c in checks)

    @staticmethod
    def _only_computed_check(comp: Computed) -> Check:
        # "{* tstr => any}" and the like: every entry must fit the one
        # computed member (a key that does not is an extension key).
        key_ok, value_ok, low, high = comp.ktype.check, comp.vtype.check, comp.low, comp.high

        def check(v: Any) -> bool:
            if (v.__class__ is not dict and not isinstance(v, dict)) or not low <= len(v) <= high:
                return False
            for k, x in v.items():
                if not key_ok(k) or not value_ok(x):
                    return False
            return True

        return check

    def _general_check(self, v: Any) -> bool:
        if not isinstance(v, dict):
            return False
        consumed: set = set()
        if not _match_alts(self.alts, v, consumed, "", None):
            return False
        return self._rest(v, consumed, "", None)

    def _rest(self, d: dict, consumed: set, path: str, out: Findings | None) -> bool:
        """The keys no member took: computed entries, then extension keys."""
        ok = True
        left = [k for k in d if k not in consumed] if len(consumed) != len(d) else []
        for comp in self.computed:
            count = 0
            for k in left:
                if k in consumed or not comp.ktype.check(k):
                    continue
                if count >= comp.high:
                    break
                consumed.add(k)
                count += 1
                if out is None:
                    if not comp.vtype.check(d[k]):
                        return False
                elif not comp.vtype.explain(d[k], join_key(path, k), out):
                    ok = False
            if count < comp.low:
                if out is None:
                    return False
                out.append(Violation(path, f"at least {comp.low} {comp.ktype.desc} keys", f"{count}"))
                ok = False
        for k in left:
            if k not in consumed:
                if out is None:
                    return False
                out.append(Violation(join_key(path, k), "a key the schema defines", "extension key", EXTENSION_KEY))
        return ok

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        if not isinstance(v, dict):
            out.append(Violation(path, self.desc, describe_found(v)))
            return False
        consumed: set = set()
        ok = _match_alts(self.alts, v, consumed, path, out)
        return self._rest(v, consumed, path, out) and ok


class ArrayType(TypeNode):
    """``[ entries ]``: each entry is ``(low, high, type)``, matched greedily
    from the left (no backtracking, which the AMP schemas never need)."""

    __slots__ = ("entries",)

    def __init__(self, entries: Sequence[tuple[int, float, TypeNode]], desc: str | None = None) -> None:
        self.entries = tuple(entries)
        self.desc = desc or "[" + ", ".join(_occ_text(lo, hi) + t.desc for lo, hi, t in self.entries) + "]"
        self.check = self._build_check()

    def _build_check(self) -> Check:
        if len(self.entries) == 1:
            low, high, t = self.entries[0]
            item = t.check

            def homogeneous(v: Any) -> bool:
                if not is_array(v) or not low <= len(v) <= high:
                    return False
                for x in v:
                    if not item(x):
                        return False
                return True

            return homogeneous
        return self._general_check

    def _general_check(self, v: Any) -> bool:
        if not is_array(v):
            return False
        return self._walk(v, "", None)

    def _walk(self, v: Sequence[Any], path: str, out: Findings | None) -> bool:
        i, n = 0, len(v)
        stuck: tuple[int, Findings] | None = None  # why the item at i fitted no entry
        for low, high, t in self.entries:
            count = 0
            while count < high and i < n:
                if not t.check(v[i]):
                    if out is None:
                        break
                    trial: Findings = []
                    if not t.explain(v[i], join_index(path, i), trial):
                        if count < low:
                            out.extend(trial)
                            return False
                        stuck = (i, trial)
                        break
                    out.extend(trial)  # matched, with extension keys inside
                i += 1
                count += 1
            if count < low:
                if out is not None:
                    out.append(Violation(path, self.desc, describe_found(v)))
                return False
        if i < n:
            if out is not None:
                if stuck is not None and stuck[0] == i:
                    out.extend(stuck[1])
                else:
                    out.append(Violation(join_index(path, i), "end of array", describe_found(v[i])))
            return False
        return True

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        if not is_array(v):
            out.append(Violation(path, self.desc, describe_found(v)))
            return False
        return self._walk(v, path, out)


def _occ_text(low: int, high: float) -> str:
    if (low, high) == (1, 1):
        return ""
    if (low, high) == (0, 1):
        return "? "
    if high == float("inf"):
        return "* " if low == 0 else "+ " if low == 1 else f"{low}* "
    return f"{low}*{high} "
