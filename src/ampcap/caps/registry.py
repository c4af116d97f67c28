"""An in-memory capability registry with stable pages (RFC 004 §6.1, §6.5).

Order is deterministic: name ascending (byte order, §4.1 names are
case-sensitive), then version by SemVer precedence, descending for
``newest-first`` (the default) and ascending for ``oldest-first``. Two
versions of one name that differ only in build metadata have the same
precedence; the registry breaks that tie by the build identifiers so that
the order stays total (a cursor position must name exactly one place).

A listing can be filtered by name (or an alias of it) and a §4.4 range, and
paged with ``limit`` and opaque cursors (ruling R7, :mod:`.cursor`).

Stable pages while the registry grows: every entry records the generation
at which it was added, and a cursor pins the generation of the listing's
first page, so entries added later are invisible to that listing: the
listing reads one consistent snapshot. A cursor resumes strictly after the
last entry it returned (a key, not an offset), so an addition before the
cursor's position cannot shift the rest: no duplicates, no skips. Entries
are never removed (a daemon's capability set is declared, not retracted),
which is what makes the generation test sufficient.

Per name, versions are kept sorted with their generation; a query bisects
to the range's bounds and to the resume point, then walks at most ``limit``
matching entries (and one look-ahead), so the cost of a page does not
depend on the registry's size.

Descriptors learnt from a peer (CAP_DECLARE) go through
:meth:`Registry.add_declared`, which applies an :class:`Admission` policy
first: the Offline Registry Profile (§5.3), the Public Registry Trust
Profile's signature requirement (§5.2, A.22: 3001, and the descriptor is
not registered) and schema artifact verification (A.11: 5002).

Sans-I/O: time arrives as ``now_ms``; the cursor key is injected.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterator, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec

from ..display import quoted, shown
from ..errors import AmpError
from ..wire.cbor import dumps
from .cursor import CURSOR_TTL_MS, Cursor, CursorCodec
from .descriptor import Descriptor, join_path
from .descriptor_sig import KeyResolver, TrustProfile, verify_descriptor
from .names import AliasTable
from .order import NEWEST_FIRST, OLDEST_FIRST, ORDERS
from .semver import Range, Version

if TYPE_CHECKING:
    from .bundle import SchemaStore

__all__ = ["Registry", "Page", "Registered", "Admission", "NEWEST_FIRST", "OLDEST_FIRST",
           "DEFAULT_PAGE_LIMIT", "MAX_PAGE_LIMIT"]

BAD_REQUEST, NOT_FOUND, VERSION_MISMATCH = 4001, 4002, 4003
DEFAULT_PAGE_LIMIT = 100  # a query without ``limit`` (or ``limit = 0``) still gets bounded pages
MAX_PAGE_LIMIT = 1000  # a larger ``limit`` is served as this: one CAP_DECLARE stays a sane size


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


class Page(msgspec.Struct, Generic[T], frozen=True):
    items: tuple[T, ...]
    next_cursor: str | None


def _order_key(v: Version) -> tuple[Any, tuple[str, ...]]:
    # Precedence first; build metadata only breaks ties between versions of
    # equal precedence, so that the listing order is total.
    return (v.sort_key, v.build)


_version_of = attrgetter("version")


class _Versions(Generic[T]):
    """One name's entries, ascending by (precedence, build)."""

    __slots__ = ("keys", "items", "generations")

    def __init__(self) -> None:
        self.keys: list[tuple[Any, tuple[str, ...]]] = []
        self.items: list[T] = []
        self.generations: list[int] = []

    def insert(self, item: T, generation: int) -> None:
        key = _order_key(item.version)
        at = bisect.bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.items.insert(at, item)
        self.generations.insert(at, generation)

    def bounds(self, rng: Range | None) -> tuple[int, int]:
        """The index slice that can hold versions of ``rng``."""
        return (0, len(self.items)) if rng is None else rng.bounds(self.items, _version_of)


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """What a descriptor learnt from elsewhere must pass before it is
    registered. Every check that fails raises, and nothing is added.

    * ``offline``: Offline Registry Profile, both refs carry
      ``bundle_id`` + ``artifact_key`` (§4.2, §5.3) → 4001;
    * ``trust``/``resolve_key``: descriptor signature (§5.2); under the
      Public Registry Trust Profile a missing or bad one is 3001 (A.22),
      under the private profile a present one must still verify;
    * ``store``: the schema artifacts are loaded and their hashes verified
      now (§5.2: before the schema is used), 5002 on a miss (A.11).
    """

    trust: TrustProfile = TrustProfile.PRIVATE
    resolve_key: KeyResolver | None = None
    offline: bool = False
    store: SchemaStore | None = None

    def __call__(self, descriptor: Descriptor, *, path: str = "") -> None:
        if self.offline:
            descriptor.check_offline_profile(path=path)
        verify_descriptor(descriptor, self.resolve_key, profile=self.trust, path=path)
        if self.store is not None:
            self.store.load_json(descriptor.input_schema)
            self.store.load_json(descriptor.output_schema)


class Registry(Generic[T]):
    """Capabilities by canonical name, growing by :meth:`add`."""

    def __init__(self, *, cursor_key: bytes, cursor_ttl_ms: int = CURSOR_TTL_MS,
                 admission: Callable[..., None] | None = None) -> None:
        self._codec = CursorCodec(cursor_key, ttl_ms=cursor_ttl_ms)
        self._by_name: dict[str, _Versions[T]] = {}
        self._names: list[str] = []  # sorted
        self._by_id: dict[str, T] = {}
        self.aliases = AliasTable()
        self.admission = admission
        self.generation = 0
        # Different registries (a restarted daemon) never accept each other's cursors.
        self._salt = hashlib.sha256(b"ampcap-registry" + cursor_key).digest()[:8]

    # ------------------------------------------------------------ contents

    def add(self, item: T) -> None:
        """Register one entry (4001 for a duplicate id or an alias clash).
        Local entries are trusted: :attr:`admission` applies to
        :meth:`add_declared` only."""
        self._check_new(item)
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

    def _check_new(self, item: T) -> None:
        # Everything add() could refuse, checked before anything changes.
        if item.id in self._by_id:
            raise AmpError(BAD_REQUEST, f"capability {item.id} is already registered")
        if item.name not in self._by_name:
            self.aliases.check_name(item.name)
        for alias in item.aliases:
            self.aliases.check_alias(alias, item.name)

    def add_declared(self, body: Any) -> tuple[Descriptor, ...]:
        """Register the descriptors of a CAP_DECLARE body (§6.2), all or
        none: each must parse (§4.2 rules: 1001 shape, 4001 semantics) and
        pass :attr:`admission`. Returns them, in the body's order."""
        if not isinstance(body, Mapping) or not isinstance(body.get("capabilities"), (list, tuple)):
            raise AmpError(1001, "CAP_DECLARE body needs a 'capabilities' array", path="body.capabilities")
        raw = body["capabilities"]
        if not raw:
            raise AmpError(BAD_REQUEST, "CAP_DECLARE 'capabilities' must not be empty", path="body.capabilities")
        parsed: list[Descriptor] = []
        seen: set[str] = set()
        for i, obj in enumerate(raw):
            where = join_path("body.capabilities", i)
            descriptor = Descriptor.from_wire(obj, path=where)
            if self.admission is not None:
                self.admission(descriptor, path=where)
            if descriptor.id in seen:
                raise AmpError(BAD_REQUEST, f"capability {descriptor.id} is declared twice", path=where)
            seen.add(descriptor.id)
            self._check_new(descriptor)  # type: ignore[arg-type]
            parsed.append(descriptor)
        for descriptor in parsed:
            self.add(descriptor)  # type: ignore[arg-type]
        return tuple(parsed)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[T]:
        """Every entry, name ascending then version ascending."""
        for name in self._names:
            yield from self._by_name[name].items

    def names(self) -> list[str]:
        return list(self._names)

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

    def resolve(self, name: str, version_range: Range | None = None) -> tuple[str, list[T]]:
        """Canonical name and its versions inside ``version_range``
        (ascending): 4002 when the name (or alias) is unknown, 4003 when no
        version is inside the range."""
        canonical = self.aliases.resolve(name)
        versions = self._by_name.get(canonical)
        if versions is None:
            raise AmpError(NOT_FOUND, f"no capability named {quoted(name)}")
        if version_range is None:
            return canonical, list(versions.items)
        lo, hi = versions.bounds(version_range)
        inside = [item for item in versions.items[lo:hi] if version_range.contains(item.version)]
        if not inside:
            raise AmpError(VERSION_MISMATCH, f"no version of {canonical} satisfies {shown(version_range)}")
        return canonical, inside

    # -------------------------------------------------------------- query

    def query(self, name: str | None, *, version_range: Range | None = None, order: str = NEWEST_FIRST,
              limit: int | None = None, cursor: str | None = None, filter: Mapping[str, Any] | None = None,
              now_ms: int, allowed: Callable[[str], bool] | None = None) -> Page[T]:
        """One page of the listing. ``name`` None lists every name (for
        tools; CAP_QUERY always names one). ``filter`` is the filter as the
        client sent it: a cursor is bound to it and to ``order``, and to the
        registry snapshot of the listing's first page. ``allowed`` skips
        the names it refuses (a caller's ACL over a listing of every name)."""
        if order not in ORDERS:
            raise AmpError(BAD_REQUEST, f"order must be {NEWEST_FIRST!r} or {OLDEST_FIRST!r}", path="body.order")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise AmpError(BAD_REQUEST, "limit must be an unsigned integer", path="body.limit")
        canonical = self.aliases.resolve(name) if name is not None else None
        if canonical is not None and canonical not in self._by_name:
            raise AmpError(NOT_FOUND, f"no capability named {quoted(name)}")
        if filter is None:
            filter = {"name": name, "range": version_range.text if version_range is not None else None}
        context = self._context(filter, order)
        if cursor is None:
            generation, after = self.generation, None
        else:
            opened = self._codec.open(cursor, context, now_ms)
            try:
                version = Version.parse(opened.version)
            except AmpError:  # only a cursor we minted gets here, but fail closed
                raise AmpError(BAD_REQUEST, "invalid or expired cursor", path="body.cursor") from None
            generation, after = opened.generation, (opened.name, _order_key(version))
            if generation > self.generation:
                raise AmpError(BAD_REQUEST, "invalid or expired cursor", path="body.cursor")
        size = min(limit, MAX_PAGE_LIMIT) if limit else DEFAULT_PAGE_LIMIT
        picked: list[T] = []
        more = False
        for item in self._walk(canonical, version_range, order, generation, after, allowed):
            if len(picked) == size:
                more = True
                break
            picked.append(item)
        if not picked:
            if cursor is not None:
                raise AmpError(BAD_REQUEST, "cursor is past the end of the result set", path="body.cursor")
            if canonical is None:
                raise AmpError(NOT_FOUND, "the registry holds no capability" if version_range is None
                               else f"no capability has a version satisfying {shown(version_range)}")
            raise AmpError(VERSION_MISMATCH, f"no version of {canonical} satisfies {shown(version_range)}")
        next_cursor = None
        if more:
            last = picked[-1]
            next_cursor = self._codec.mint(Cursor(last.name, str(last.version), generation), context, now_ms)
        return Page(tuple(picked), next_cursor)

    def _walk(self, name: str | None, rng: Range | None, order: str, generation: int,
              after: tuple[str, tuple[Any, tuple[str, ...]]] | None,
              allowed: Callable[[str], bool] | None = None) -> Iterator[T]:
        """Entries of snapshot ``generation`` in listing order, strictly
        after the position ``after`` = (name, order key)."""
        newest_first = order == NEWEST_FIRST
        names = self._names
        if name is not None:
            first, stop = bisect.bisect_left(names, name), bisect.bisect_right(names, name)
        else:
            first, stop = 0, len(names)
        if after is not None:
            # name ASC: names before the cursor's were finished on earlier pages.
            first = max(first, bisect.bisect_left(names, after[0]))
        for n in range(first, stop):
            current = names[n]
            if allowed is not None and not allowed(current):
                continue
            versions = self._by_name[current]
            keys, items, generations = versions.keys, versions.items, versions.generations
            lo, hi = versions.bounds(rng)
            if after is not None and after[0] == current:
                if newest_first:
                    hi = min(hi, bisect.bisect_left(keys, after[1]))
                else:
                    lo = max(lo, bisect.bisect_right(keys, after[1]))
            indices = range(hi - 1, lo - 1, -1) if newest_first else range(lo, hi)
            for i in indices:
                if generations[i] > generation:
                    continue  # added after this listing began
                item = items[i]
                if rng is not None and not rng.contains(item.version):
                    continue
                yield item

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
