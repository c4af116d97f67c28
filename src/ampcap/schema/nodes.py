"""The compiled form of CDDL: one small node per type, built once at load.

Every type node offers two ways in:

- ``check(value) -> bool``: the fast path. True means *valid and clean*: the
  value matches and carries no extension keys anywhere. It builds no paths
  and allocates nothing in the common case; it is a plain closure or bound
  method picked at build time for the shape at hand (flat maps get a
  single loop over the value's entries against a precomputed key table).
- ``explain(value, path, out) -> bool``: the slow path, run only when
  ``check`` said no. It appends :class:`Violation` findings to ``out`` (with
  paths) and returns True when there are no *errors* (extension keys alone
  are findings, not errors).

``check(v)`` is True exactly when ``explain`` would append nothing; the
property tests hold the two to that.

Maps are matched by key (RFC 8610 §3.5) and are open: a key the schema does
not know is an ``extension-key`` finding, because RFC 004 §10 lets receivers
ignore unknown fields while tools must still point them out. Booleans are not
integers and integers are not floats, as in CBOR (Python's ``True`` is an
``int``, so every integer test excludes ``bool``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from cbor2 import CBORTag

from .violations import ERROR, EXTENSION_KEY, Violation, describe_found, join_index, join_key

Check = Callable[[Any], bool]
Findings = list[Violation]

# Recursive rules are the only way to loop; past this many nested levels a
# value is refused instead of exhausting the Python stack.
MAX_RECURSION = 64


def _errors(out: Findings) -> int:
    return sum(1 for v in out if v.kind == ERROR)


def _extensions(out: Findings) -> int:
    return sum(1 for v in out if v.kind == EXTENSION_KEY)


def is_int(v: Any) -> bool:
    c = v.__class__
    return c is int or (c is not bool and isinstance(v, int))


def _is_str(v: Any) -> bool:
    return v.__class__ is str or isinstance(v, str)


def _is_bytes(v: Any) -> bool:
    return v.__class__ is bytes or isinstance(v, (bytes, bytearray))


def _is_array(v: Any) -> bool:
    return v.__class__ is list or isinstance(v, (list, tuple))


class TypeNode:
    """Base of all type nodes. Subclasses set ``check`` and ``desc``."""

    __slots__ = ("check", "desc")

    check: Check
    desc: str

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        # Leaf types: a value either matches or does not; nothing nested.
        if self.check(v):
            return True
        out.append(Violation(path, self.desc, describe_found(v)))
        return False


# ---------------------------------------------------------------- leaf types


def _uint(v: Any) -> bool:
    c = v.__class__
    if c is int:
        return v >= 0
    return c is not bool and isinstance(v, int) and v >= 0


def _nint(v: Any) -> bool:
    return is_int(v) and v < 0


def _float(v: Any) -> bool:
    return v.__class__ is float


def _number(v: Any) -> bool:
    return v.__class__ is float or is_int(v)


def _bool(v: Any) -> bool:
    return v is True or v is False


def _null(v: Any) -> bool:
    return v is None


def _any(v: Any) -> bool:
    return True


# Prelude names the engine understands, with the test each stands for.
PRELUDE: dict[str, tuple[Check, str]] = {
    "any": (_any, "any"),
    "uint": (_uint, "uint"),
    "unsigned": (_uint, "uint"),
    "nint": (_nint, "nint"),
    "int": (is_int, "int"),
    "integer": (is_int, "int"),
    "tstr": (_is_str, "tstr"),
    "text": (_is_str, "tstr"),
    "bstr": (_is_bytes, "bstr"),
    "bytes": (_is_bytes, "bstr"),
    "bool": (_bool, "bool"),
    "true": (lambda v: v is True, "true"),
    "false": (lambda v: v is False, "false"),
    "null": (_null, "null"),
    "nil": (_null, "null"),
    "float": (_float, "float"),
    "float16": (_float, "float16"),
    "float32": (_float, "float32"),
    "float64": (_float, "float64"),
    "float16-32": (_float, "float"),
    "float32-64": (_float, "float"),
    "number": (_number, "number"),
}


class Prim(TypeNode):
    """A prelude type (``uint``, ``tstr``, ``any``, ...)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name
        self.check, self.desc = PRELUDE[name]


class Literal(TypeNode):
    """A literal value: text, integer, float or byte string."""

    __slots__ = ("value",)

    def __init__(self, value: str | int | float | bytes) -> None:
        self.value = value
        self.desc = _literal_text(value)
        if isinstance(value, str):
            self.check = lambda v: (v.__class__ is str or isinstance(v, str)) and v == value
        elif isinstance(value, bytes):
            self.check = lambda v: _is_bytes(v) and v == value
        elif isinstance(value, float):
            self.check = lambda v: v.__class__ is float and v == value
        else:
            self.check = lambda v: is_int(v) and v == value


def _literal_text(value: object) -> str:
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, bytes):
        return "h'" + value.hex() + "'"
    return repr(value)


class IntRange(TypeNode):
    """``lo..hi`` (inclusive) or ``lo...hi`` (exclusive) over ints or floats."""

    __slots__ = ("lo", "hi", "inclusive")

    def __init__(self, lo: int | float, hi: int | float, inclusive: bool) -> None:
        self.lo, self.hi, self.inclusive = lo, hi, inclusive  # kept for the shipped rule set (.artifact)
        kind = _float if isinstance(lo, float) else is_int
        if inclusive:
            self.check = lambda v: kind(v) and lo <= v <= hi
        else:
            self.check = lambda v: kind(v) and lo <= v < hi
        self.desc = f"{lo}{'..' if inclusive else '...'}{hi}"


class Sized(TypeNode):
    """``tstr .size n``, ``bstr .size (lo..hi)``, ``uint .size n``.

    For strings the size is the encoded length in bytes (text is UTF-8); for
    unsigned integers it is the byte width, so ``uint .size 2`` is < 65536."""

    __slots__ = ("base", "lo", "hi")

    def __init__(self, base: str, lo: int, hi: int) -> None:
        self.base, self.lo, self.hi = base, lo, hi
        size = str(lo) if lo == hi else f"({lo}..{hi})"
        self.desc = f"{base} .size {size}"
        if base == "bstr":
            self.check = lambda v: _is_bytes(v) and lo <= len(v) <= hi
        elif base == "tstr":
            self.check = lambda v: _is_str(v) and lo <= _utf8_len(v) <= hi
        else:  # uint: only the upper bound means anything for a byte width
            limit = 256**hi
            self.check = lambda v: _uint(v) and v < limit

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        if self.check(v):
            return True
        if self.base == "bstr" and _is_bytes(v):
            found = f"bstr of {len(v)} bytes"
        elif self.base == "tstr" and _is_str(v):
            found = f"tstr of {_utf8_len(v)} bytes"
        else:
            found = describe_found(v)
        out.append(Violation(path, self.desc, found))
        return False


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


class Tagged(TypeNode):
    """``#6.n(type)``: a CBOR tag with a given number around a given type."""

    __slots__ = ("tag", "inner")

    def __init__(self, tag: int, inner: TypeNode) -> None:
        self.tag, self.inner = tag, inner
        self.desc = f"#6.{tag}({inner.desc})"
        inner_check = inner.check
        self.check = lambda v: isinstance(v, CBORTag) and v.tag == tag and inner_check(v.value)

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        if not isinstance(v, CBORTag) or v.tag != self.tag:
            out.append(Violation(path, self.desc, describe_found(v)))
            return False
        return self.inner.explain(v.value, path, out)


class Choice(TypeNode):
    """``a / b / c``. The fast path takes the first branch that is clean;
    the slow path picks the most specific outcome (see ``explain``)."""

    __slots__ = ("branches",)

    def __init__(self, branches: Sequence[TypeNode], desc: str | None = None) -> None:
        self.branches = tuple(branches)
        self.desc = desc or " / ".join(b.desc for b in self.branches)
        self.check = self._build_check()

    def _build_check(self) -> Check:
        branches = self.branches
        if all(isinstance(b, Literal) and isinstance(b.value, str) for b in branches):
            allowed = frozenset(b.value for b in branches)  # type: ignore[attr-defined]
            return lambda v: _is_str(v) and v in allowed
        if len(branches) == 2:
            first, second = branches[0].check, branches[1].check
            return lambda v: first(v) or second(v)
        checks = tuple(b.check for b in branches)
        return lambda v: any(c(v) for c in checks)

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        # A branch that matches wins; among several, the one with the fewest
        # extension keys (so a value is read as the form it fits best). When
        # none matches, report the branch that got furthest: its deepest
        # error, then the fewest errors. If every branch failed right at this
        # value (wrong type), say so once, listing what would have fitted.
        best_ok: Findings | None = None
        failures: list[Findings] = []
        for branch in self.branches:
            trial: Findings = []
            if branch.explain(v, path, trial):
                if best_ok is None or _extensions(trial) < _extensions(best_ok):
                    best_ok = trial
                    if not trial:
                        break
            else:
                failures.append(trial)
        if best_ok is not None:
            out.extend(best_ok)
            return True
        if all(len(f) == 1 and f[0].path == path for f in failures):
            out.append(Violation(path, self.desc, failures[0][0].found))
            return False
        out.extend(max(failures, key=_failure_score))
        return False


def _depth(path: str) -> int:
    return path.count(".") + path.count("[")


def _failure_score(found: Iterable[Violation]) -> tuple[int, int]:
    errors = [f for f in found if f.kind == ERROR]
    return (max((_depth(f.path) for f in errors), default=0), -len(errors))


class Reference(TypeNode):
    """A reference to a rule that was still being compiled when it was met
    (a recursive rule). Only these pay for indirection, and they count
    nesting so a deep value cannot exhaust the stack."""

    __slots__ = ("name", "target", "depth")

    def __init__(self, name: str) -> None:
        self.name = name
        self.desc = name
        self.target: TypeNode | None = None
        self.depth = 0
        self.check = self._check

    def _check(self, v: Any) -> bool:
        assert self.target is not None
        if self.depth >= MAX_RECURSION:
            return False
        self.depth += 1
        try:
            return self.target.check(v)
        finally:
            self.depth -= 1

    def explain(self, v: Any, path: str, out: Findings) -> bool:
        assert self.target is not None
        if self.depth >= MAX_RECURSION:
            out.append(Violation(path, self.name, f"nesting deeper than {MAX_RECURSION} levels"))
            return False
        self.depth += 1
        try:
            return self.target.explain(v, path, out)
        finally:
            self.depth -= 1


# ---------------------------------------------------------------- groups


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
                out.append(Violation(join_key(path, k), f"key {_literal_text(k)}", "absent"))
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
    taken, trial = max(failures, key=lambda f: (len(f[0]), -_errors(f[1])))
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
                if not _is_array(v) or not low <= len(v) <= high:
                    return False
                for x in v:
                    if not item(x):
                        return False
                return True

            return homogeneous
        return self._general_check

    def _general_check(self, v: Any) -> bool:
        if not _is_array(v):
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
        if not _is_array(v):
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
