"""An in-memory capability registry with stable pages (RFC 004 §6.1, §6.5).

Order is deterministic: name ascending, then version by SemVer precedence,
descending for ``newest-first`` (the default) and ascending for
``oldest-first``. A listing can be filtered by name (or an alias of it)
and a §4.4 range, and paged with ``limit`` and opaque cursors (R7).

Stable pages while the registry grows: every entry records the generation
at which it was added, and a cursor pins the generation of the listing's
first page, so entries added later are invisible to that listing. A cursor
resumes strictly after the last ``(name, version)`` it returned (a key, not
an offset), so an addition before the cursor's position cannot shift the
rest: no duplicates, no skips. Entries are never removed (a daemon's
capability set is declared, not retracted), which is what makes the
generation test sufficient.

Per name, versions are kept sorted with their generation; a query is a
bisect to the resume point plus a walk of at most ``limit`` matching
entries (and one look-ahead), so the cost of a page does not depend on the
registry's size.

Sans-I/O: time arrives as ``now_ms``; the cursor key is injected.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..errors import AmpError
from ..wire.cbor import dumps
from .cursor import Cursor, CursorCodec
from .names import AliasTable
from .semver import Range, Version

__all__ = ["Registry", "Page", "Registered", "NEWEST_FIRST", "OLDEST_FIRST", "DEFAULT_PAGE_LIMIT"]

BAD_REQUEST, NOT_FOUND, VERSION_MISMATCH = 4001, 4002, 4003
NEWEST_FIRST, OLDEST_FIRST = "newest-first", "oldest-first"
DEFAULT_PAGE_LIMIT = 100  # a query without ``limit`` still gets bounded pages


class Registered(Protocol):
    """What the registry stores: a descriptor, or anything that has its
    identity (a manifest's CapabilitySpec)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> Version: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...


T = TypeVar("T", bound=Registered)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    next_cursor: str | None


class _Versions(Generic[T]):
    """One name's entries, ascending by precedence."""

    __slots__ = ("keys", "items", "generations")

    def __init__(self) -> None:
        self.keys: list[Version] = []
        self.items: list[T] = []
        self.generations: list[int] = []

    def insert(self, item: T, generation: int) -> None:
        at = bisect.bisect_left(self.keys, item.version)
        self.keys.insert(at, item.version)
        self.items.insert(at, item)
        self.generations.insert(at, generation)


class Registry(Generic[T]):
    def __init__(self, *, cursor_key: bytes) -> None:
        self._codec = CursorCodec(cursor_key)
        self._by_name: dict[str, _Versions[T]] = {}
        self._names: list[str] = []  # sorted
        self._by_id: dict[str, T] = {}
        self.aliases = AliasTable()
        self.generation = 0
        # Different registries (a restarted daemon) never accept each other's cursors.
        self._salt = hashlib.sha256(b"ampcap-registry" + cursor_key).digest()[:8]

    # ------------------------------------------------------------ contents

    def add(self, item: T) -> None:
        if item.id in self._by_id:
            raise AmpError(BAD_REQUEST, f"capability {item.id} is already registered")
        versions = self._by_name.get(item.name)
        if versions is None:
            self.aliases.add_name(item.name)
            versions = self._by_name[item.name] = _Versions()
            bisect.insort(self._names, item.name)
        for alias in item.aliases:
            self.aliases.add_alias(alias, item.name)
        self.generation += 1
        versions.insert(item, self.generation)
        self._by_id[item.id] = item

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[T]:
        for name in self._names:
            yield from self._by_name[name].items

    def get(self, capability_id: str) -> T | None:
        return self._by_id.get(capability_id)

    def canonical_name(self, name: str) -> str:
        return self.aliases.resolve(name)

    def versions(self, name: str) -> list[T]:
        """Every version of ``name`` (or of the name it is an alias of),
        ascending; [] when unknown. The registry's own list, not a copy:
        read it, do not change it."""
        found = self._by_name.get(self.aliases.resolve(name))
        return found.items if found is not None else []

    # -------------------------------------------------------------- query

    def query(self, name: str | None, *, version_range: Range | None = None, order: str = NEWEST_FIRST,
              limit: int | None = None, cursor: str | None = None, filter: Mapping[str, Any] | None = None,
              now_ms: int) -> Page[T]:
        """One page of the listing. ``name`` None lists every name (for
        tools; CAP_QUERY always names one). ``filter`` is the filter as the
        client sent it: a cursor is bound to it and to ``order``."""
        if order not in (NEWEST_FIRST, OLDEST_FIRST):
            raise AmpError(BAD_REQUEST, f"order must be {NEWEST_FIRST!r} or {OLDEST_FIRST!r}", path="body.order")
        canonical = self.aliases.resolve(name) if name is not None else None
        if canonical is not None and canonical not in self._by_name:
            raise AmpError(NOT_FOUND, f"no capability named {name!r}")
        context = self._context(filter if filter is not None else {"name": name, "range": version_range and
                                                                     version_range.text}, order)
        if cursor is None:
            generation, after = self.generation, None
        else:
            opened = self._codec.open(cursor, context, now_ms)
            generation, after = opened.generation, (opened.name, Version.parse(opened.version))
        size = limit if limit else DEFAULT_PAGE_LIMIT
        picked: list[T] = []
        more = False
        for item in self._walk(canonical, version_range, order, generation, after):
            if len(picked) == size:
                more = True
                break
            picked.append(item)
        if not picked:
            if cursor is not None:
                raise AmpError(BAD_REQUEST, "cursor is past the end of the result set", path="body.cursor")
            where = f"of {canonical}" if canonical else "at all"
            raise AmpError(VERSION_MISMATCH, f"no version {where} satisfies {version_range}")
        next_cursor = None
        if more:
            last = picked[-1]
            next_cursor = self._codec.mint(Cursor(last.name, str(last.version), generation), context, now_ms)
        return Page(tuple(picked), next_cursor)

    def _walk(self, name: str | None, rng: Range | None, order: str, generation: int,
              after: tuple[str, Version] | None) -> Iterator[T]:
        """Entries of the snapshot in listing order, strictly after ``after``."""
        newest_first = order == NEWEST_FIRST
        if name is not None:
            names = [name]
        else:
            start = bisect.bisect_left(self._names, after[0]) if after is not None else 0
            names = self._names[start:]
        for current in names:
            versions = self._by_name[current]
            keys, items, generations = versions.keys, versions.items, versions.generations
            if after is not None and after[0] == current:
                if newest_first:
                    indices: Iterator[int] | range = range(bisect.bisect_left(keys, after[1]) - 1, -1, -1)
                else:
                    indices = range(bisect.bisect_right(keys, after[1]), len(keys))
            elif after is not None and after[0] > current:
                continue  # name ASC: this name was finished on earlier pages
            else:
                indices = range(len(keys) - 1, -1, -1) if newest_first else range(len(keys))
            for i in indices:
                if generations[i] > generation:
                    continue  # added after this listing began
                if rng is not None and not rng.contains(keys[i]):
                    continue
                yield items[i]

    def _context(self, flt: Mapping[str, Any], order: str) -> bytes:
        # Bound to the filter exactly as sent and the effective order (§6.1:
        # both must stay unchanged across pages; ``limit`` may change).
        return hashlib.sha256(dumps([_plain(flt), order]) + self._salt).digest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
