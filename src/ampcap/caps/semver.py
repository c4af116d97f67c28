"""SemVer 2.0.0 versions and the RFC 004 §4.4 range subset (rulings R11, R14).

Versions order by SemVer precedence: ``major.minor.patch`` numerically, a
pre-release sorts before its release, pre-release identifiers compare
numerically when both are numeric and as ASCII otherwise, numeric identifiers
sort before alphanumeric ones, and a longer identifier list wins when all
shared identifiers are equal. Build metadata is kept (and printed) but takes
no part in precedence, so ``1.0.0+a`` and ``1.0.0+b`` are equal in order yet
remain different strings: registry ids are strings, so they stay distinct
entries, while comparisons treat them as the same version.

Ranges are only what RFC 004 §4.4 makes mandatory: an exact version, or a
space-separated set of comparators that must all hold. Anything else (``||``,
``^``, ``~``, ``1.x``, partial versions, hyphen ranges) is refused with 4001
and a message naming the form, rather than guessed at.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from ..display import quoted
from ..errors import AmpError

T = TypeVar("T")

__all__ = ["Version", "Range", "Comparator"]

_BAD_REQUEST = 4001

# SemVer 2.0.0 §2, §9, §10: no leading zeros in numeric parts; identifiers of
# [0-9A-Za-z-], non-empty. ASCII digits only (``\d`` would take any Unicode
# digit, and int() would read it), and the version must end the text (``$``
# would allow a trailing newline).
# Numbers of at most 20 digits (every uint64 fits): SemVer sets no limit, but
# Python refuses int() on text over 4,300 digits, and a peer's version string
# must get 4001, not an exception. (A longer one is simply not a version.)
_NUM = r"0|[1-9][0-9]{0,19}"
_PRE_ID = r"(?:0|[1-9][0-9]{0,19}|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_BUILD_ID = r"[0-9A-Za-z-]+"
_VERSION_RE = re.compile(
    rf"^({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
    rf"(?:\+({_BUILD_ID}(?:\.{_BUILD_ID})*))?\Z"
)


def _pre_key(pre: tuple[str, ...]) -> tuple[tuple[int, int, str], ...]:
    # Numeric identifiers sort before alphanumeric ones (SemVer §11.4.3).
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre)


@functools.total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class Version:
    """A SemVer 2.0.0 version. Equality and hashing follow precedence."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()
    _key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # No pre-release sorts after any pre-release of the same triple.
        pre = (1,) if not self.prerelease else (0, _pre_key(self.prerelease))
        object.__setattr__(self, "_key", (self.major, self.minor, self.patch, pre))

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse strictly; malformed text is ``AmpError(4001)`` (R6)."""
        return _parse_version(text) if type(text) is str else _bad_type(text)

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    @property
    def core(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @property
    def sort_key(self) -> tuple:
        """A tuple whose natural order is SemVer precedence."""
        return self._key

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Version({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key < other._key

    def __hash__(self) -> int:
        return hash(self._key)


def _bad_type(value: object) -> Version:
    raise AmpError(_BAD_REQUEST, f"a version must be text, not {type(value).__name__}")


@functools.lru_cache(maxsize=4096)
def _parse_version(text: str) -> Version:
    # Versions repeat (every descriptor, every invoke): parse each text once.
    m = _VERSION_RE.fullmatch(text)
    if m is None:
        raise AmpError(_BAD_REQUEST, f"{quoted(text)} is not a SemVer 2.0.0 version (expected MAJOR.MINOR.PATCH)")
    major, minor, patch, pre, build = m.groups()
    return Version(
        int(major), int(minor), int(patch),
        tuple(pre.split(".")) if pre else (),
        tuple(build.split(".")) if build else (),
    )


_OPERATORS = (">=", "<=", ">", "<", "=")
_HINTS = (
    ("||", "OR ranges ('||') are not supported"),
    ("^", "caret ranges ('^') are not supported"),
    ("~", "tilde ranges ('~') are not supported"),
    (" - ", "hyphen ranges are not supported"),
)
_ALLOWED = "RFC 004 §4.4 allows an exact version or comparators such as '>=1.2.0 <2.0.0'"


class Comparator(msgspec.Struct, frozen=True):
    op: str
    version: Version

    def holds(self, v: Version) -> bool:
        op, ref = self.op, self.version
        if op == ">=":
            return v >= ref
        if op == ">":
            return v > ref
        if op == "<=":
            return v <= ref
        if op == "<":
            return v < ref
        return v == ref

    def __str__(self) -> str:
        return f"{self.op}{self.version}"


class Range(msgspec.Struct, frozen=True):
    """A range of the RFC 004 §4.4 subset. ``text`` is kept verbatim so that
    re-encoded descriptors still match their signatures."""

    text: str
    comparators: tuple[Comparator, ...]
    exact: Version | None = None

    @classmethod
    def parse(cls, text: str) -> Range:
        if type(text) is not str:
            raise AmpError(_BAD_REQUEST, f"a version range must be text, not {type(text).__name__}")
        return _parse_range(text)

    @classmethod
    def exactly(cls, version: Version) -> Range:
        return cls(str(version), (Comparator("=", version),), exact=version)

    def contains(self, version: Version) -> bool:
        """Whether ``version`` satisfies every comparator, with the pre-release
        rule of R14: a pre-release only matches when some comparator names a
        pre-release of the same ``major.minor.patch``."""
        if self.exact is not None:
            return version == self.exact
        for comp in self.comparators:
            if not comp.holds(version):
                return False
        if version.prerelease:
            return any(c.version.prerelease and c.version.core == version.core for c in self.comparators)
        return True

    __contains__ = contains

    def bounds(self, items: Sequence[T], key: Callable[[T], Version]) -> tuple[int, int]:
        """The slice ``[lo, hi)`` of ``items`` (ascending by ``key(item)``,
        in precedence order) that can hold versions of this range, found by
        bisection; :meth:`contains` still decides each one inside it (R14's
        pre-release rule)."""
        lo, hi = 0, len(items)
        for comp in self.comparators:
            ref, op = comp.version, comp.op
            if op in ("=", ">="):
                lo = max(lo, bisect.bisect_left(items, ref, key=key))
            elif op == ">":
                lo = max(lo, bisect.bisect_right(items, ref, key=key))
            if op in ("=", "<="):
                hi = min(hi, bisect.bisect_right(items, ref, key=key))
            elif op == "<":
                hi = min(hi, bisect.bisect_left(items, ref, key=key))
        return lo, max(lo, hi)

    def __str__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=2048)
def _parse_range(text: str) -> Range:
    stripped = text.strip()
    if not stripped:
        raise AmpError(_BAD_REQUEST, f"empty version range; {_ALLOWED}")
    for needle, message in _HINTS:
        if needle in stripped:
            raise AmpError(_BAD_REQUEST, f"{quoted(text)}: {message}; {_ALLOWED}")
    tokens = stripped.split()
    if len(tokens) == 1 and tokens[0][0].isdigit():
        version = _parse_exact_token(text, tokens[0])
        return Range(text, (Comparator("=", version),), exact=version)
    comparators = []
    for token in tokens:
        op = next((o for o in _OPERATORS if token.startswith(o)), None)
        if op is None:
            raise AmpError(_BAD_REQUEST, f"{quoted(text)}: {quoted(token)} has no comparison operator; {_ALLOWED}")
        comparators.append(Comparator(op, _parse_exact_token(text, token[len(op):])))
    return Range(text, tuple(comparators))


def _parse_exact_token(text: str, token: str) -> Version:
    # Only the core (before any pre-release or build part) can be partial or a
    # wildcard: "1.0.0-x" is a valid pre-release whose identifier happens to be x.
    core = re.split(r"[-+]", token, maxsplit=1)[0]
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", core) or re.search(r"(^|\.)[xX*](\.|$)", core):
        raise AmpError(_BAD_REQUEST, f"{quoted(text)}: partial and wildcard versions such as {quoted(token)} are not supported; "
                             f"{_ALLOWED}")
    try:
        return _parse_version(token)
    except AmpError:
        raise AmpError(_BAD_REQUEST, f"{quoted(text)}: {quoted(token)} is not a SemVer 2.0.0 version; {_ALLOWED}") from None
