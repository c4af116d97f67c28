"""The compiled form of CDDL: one small node per type, built once at load.
This module has the node base, the leaf types, choices, tags and references;
maps and arrays (CDDL's groups) are :mod:`.group_nodes`.

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

from .violations import ERROR, EXTENSION_KEY, Violation, describe_found

Check = Callable[[Any], bool]
Findings = list[Violation]

# Recursive rules are the only way to loop; past this many nested levels a
# value is refused instead of exhausting the Python stack.
MAX_RECURSION = 64


def error_count(out: Findings) -> int:
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


def is_array(v: Any) -> bool:
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
        self.desc = literal_text(value)
        if isinstance(value, str):
            self.check = lambda v: (v.__class__ is str or isinstance(v, str)) and v == value
        elif isinstance(value, bytes):
            self.check = lambda v: _is_bytes(v) and v == value
        elif isinstance(value, float):
            self.check = lambda v: v.__class__ is float and v == value
        else:
            self.check = lambda v: is_int(v) and v == value


def literal_text(value: object) -> str:
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
