"""The registry: deterministic order, name/alias and range filters, pages
and snapshot-bound cursors (RFC 004 §6.1, §6.5, R7), admission of declared
descriptors, and the Catalog adapter over it."""

from __future__ import annotations

import functools
import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.registry import MAX_PAGE_LIMIT, Registry
from ampcap.caps.semver import Range, Version
from ampcap.errors import AmpError
from ampcap.caps.bodies import parse_query_body

KEY = b"k" * 32
NOW = 1_763_800_000_000
REF = SchemaRef(hash_alg="sha-256", hash=b"\x01" * 32, bundle_id="b", artifact_key="in.json")


def desc(name: str, version: str, aliases: tuple[str, ...] = ()) -> Descriptor:
    return Descriptor.build(name, version, REF, REF, aliases=aliases)


def registry(*ids: str) -> Registry[Descriptor]:
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    for ident in ids:
        name, _, version = ident.rpartition(":")
        reg.add(desc(name, version))
    return reg


def page_ids(page: Any) -> list[str]:
    return [d.id for d in page.items]


def listing_order(order: str) -> Any:
    """The §6.5 sort key, written independently of the registry: name ASC,
    then SemVer precedence DESC (newest-first) or ASC (oldest-first); ties
    in precedence (build metadata) by build identifiers, ascending in the
    ascending direction."""

    def compare(a: Descriptor, b: Descriptor) -> int:
        if a.name != b.name:
            return -1 if a.name < b.name else 1
        ka, kb = (a.version, a.version.build), (b.version, b.version.build)
        if ka == kb:
            return 0
        ascending = -1 if (a.version < b.version or (a.version == b.version and a.version.build < b.version.build)) else 1
        return ascending if order == "oldest-first" else -ascending

    return functools.cmp_to_key(compare)


def drain(reg: Registry[Descriptor], name: str | None, **kw: Any) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = reg.query(name, cursor=cursor, now_ms=NOW, **kw)
        seen += page_ids(page)
        cursor = page.next_cursor
        if cursor is None:
            return seen


# -------------------------------------------------------------- ordering


def test_order_is_name_asc_then_version_by_precedence() -> None:
    ids = ["org.b.x:1.0.0", "org.a.x:1.0.0", "org.a.x:2.0.0", "org.c.x:0.1.0", "org.a.x:1.10.0",
           "org.a.x:1.2.0", "org.a.x:2.0.0-rc.1", "org.a.x:2.0.0-alpha", "org.a.x:2.0.0-rc.10", "org.A.x:9.0.0"]
    newest = ["org.A.x:9.0.0",  # byte order: uppercase first
              "org.a.x:2.0.0", "org.a.x:2.0.0-rc.10", "org.a.x:2.0.0-rc.1", "org.a.x:2.0.0-alpha",
              "org.a.x:1.10.0", "org.a.x:1.2.0", "org.a.x:1.0.0", "org.b.x:1.0.0", "org.c.x:0.1.0"]
    for seed in range(5):  # insertion order never matters
        shuffled = list(ids)
        random.Random(seed).shuffle(shuffled)
        reg = registry(*shuffled)
        assert page_ids(reg.query(None, now_ms=NOW)) == newest
        oldest = page_ids(reg.query(None, order="oldest-first", now_ms=NOW))
        assert oldest[:1] == ["org.A.x:9.0.0"] and oldest[1:8] == list(reversed(newest[1:8]))
    with pytest.raises(AmpError) as info:
        registry(*ids).query(None, order="random", now_ms=NOW)
    assert info.value.code == 4001


def test_versions_equal_in_precedence_stay_distinct_and_ordered() -> None:
    reg = registry("org.x.a:1.0.0+b", "org.x.a:1.0.0+a", "org.x.a:1.0.0", "org.x.a:0.9.0")
    assert len(reg) == 4
    for limit in (1, 2, 3):
        assert drain(reg, "org.x.a", limit=limit) == ["org.x.a:1.0.0+b", "org.x.a:1.0.0+a", "org.x.a:1.0.0",
                                                      "org.x.a:0.9.0"]
        assert drain(reg, "org.x.a", limit=limit, order="oldest-first") == [
            "org.x.a:0.9.0", "org.x.a:1.0.0", "org.x.a:1.0.0+a", "org.x.a:1.0.0+b"]


# ------------------------------------------------------- filters, codes


def test_name_alias_and_range_filters() -> None:
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    for v in ("1.0.0", "1.4.0", "1.4.1-beta", "2.0.0"):
        reg.add(desc("org.x.renamed", v, aliases=("org.x.old",)))
    reg.add(desc("org.x.other", "1.0.0"))
    assert page_ids(reg.query("org.x.renamed", version_range=Range.parse(">=1.1.0 <2.0.0"), now_ms=NOW)) == [
        "org.x.renamed:1.4.0"]
    # The alias finds the same entries; the entries carry the canonical name.
    assert page_ids(reg.query("org.x.old", now_ms=NOW)) == page_ids(reg.query("org.x.renamed", now_ms=NOW))
    assert page_ids(reg.query("org.x.renamed", version_range=Range.parse(">=1.4.1-beta <2.0.0"), now_ms=NOW)) == [
        "org.x.renamed:1.4.1-beta"]  # R14: named pre-release
    assert page_ids(reg.query("org.x.renamed", version_range=Range.parse("1.4.0"), now_ms=NOW)) == [
        "org.x.renamed:1.4.0"]
    assert page_ids(reg.query("org.x.renamed", version_range=Range.parse("=2.0.0"), now_ms=NOW)) == [
        "org.x.renamed:2.0.0"]
    assert page_ids(reg.query("org.x.renamed", version_range=Range.parse(">1.0.0 <=1.4.0"), now_ms=NOW)) == [
        "org.x.renamed:1.4.0"]
    assert reg.resolve("org.x.old", Range.parse(">=1.0.0 <1.5.0"))[0] == "org.x.renamed"
    assert [d.id for d in reg.resolve("org.x.old", Range.parse(">=1.0.0 <1.5.0"))[1]] == [
        "org.x.renamed:1.0.0", "org.x.renamed:1.4.0"]


def test_no_name_is_4002_no_version_is_4003() -> None:
    reg = registry("org.x.a:1.0.0", "org.x.a:1.4.0", "org.x.a:2.0.0")
    for call in (lambda: reg.query("org.agentries.nonexistent", now_ms=NOW),
                 lambda: reg.query("org.agentries.nonexistent", version_range=Range.parse(">=1.0.0"), now_ms=NOW),
                 lambda: reg.resolve("org.agentries.nonexistent"),
                 lambda: registry().query(None, now_ms=NOW)):
        with pytest.raises(AmpError) as info:
            call()
        assert info.value.code == 4002
    for call in (lambda: reg.query("org.x.a", version_range=Range.parse(">=3.0.0 <4.0.0"), now_ms=NOW),
                 lambda: reg.query("org.x.a", version_range=Range.parse(">=1.0.1-rc.1 <1.0.1"), now_ms=NOW),
                 lambda: reg.resolve("org.x.a", Range.parse("1.2.0"))):
        with pytest.raises(AmpError) as info:
            call()
        assert info.value.code == 4003


def test_limit_defaults_and_caps() -> None:
    reg = registry(*(f"org.x.a:{i}.0.0" for i in range(MAX_PAGE_LIMIT + 5)))
    assert len(reg.query("org.x.a", now_ms=NOW).items) == 100  # absent: default page
    assert len(reg.query("org.x.a", limit=0, now_ms=NOW).items) == 100
    big = reg.query("org.x.a", limit=10**9, now_ms=NOW)
    assert len(big.items) == MAX_PAGE_LIMIT and big.next_cursor is not None
    with pytest.raises(AmpError) as info:
        reg.query("org.x.a", limit=-1, now_ms=NOW)
    assert info.value.code == 4001


def test_duplicates_and_alias_clashes_are_refused_without_side_effects() -> None:
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    reg.add(desc("org.x.a", "1.0.0", aliases=("a",)))
    generation = reg.generation
    for bad in (desc("org.x.a", "1.0.0"), desc("org.x.b", "1.0.0", aliases=("a",)), desc("a.b", "1.0.0", ("org.x.a",))):
        with pytest.raises(AmpError) as info:
            reg.add(bad)
        assert info.value.code == 4001
    assert reg.generation == generation and len(reg) == 1 and reg.get("org.x.b:1.0.0") is None
    assert reg.names() == ["org.x.a"]


# ------------------------------------------------------ pages and cursors


def test_pages_in_order_without_gaps() -> None:
    reg = registry("org.x.a:1.0.0", "org.x.a:2.0.0", "org.x.a:1.5.0", "org.x.a:0.9.0", "org.x.a:1.5.1")
    first = reg.query("org.x.a", limit=2, now_ms=NOW)
    assert page_ids(first) == ["org.x.a:2.0.0", "org.x.a:1.5.1"]
    # limit may change between pages (§6.1)
    second = reg.query("org.x.a", limit=3, cursor=first.next_cursor, now_ms=NOW)
    assert page_ids(second) == ["org.x.a:1.5.0", "org.x.a:1.0.0", "org.x.a:0.9.0"]
    assert second.next_cursor is None  # the last page carries no cursor (R7)
    # A cursor may be replayed: same page again (the snapshot is pinned).
    assert page_ids(reg.query("org.x.a", limit=2, cursor=first.next_cursor, now_ms=NOW)) == [
        "org.x.a:1.5.0", "org.x.a:1.0.0"]


def test_additions_between_pages_neither_duplicate_nor_skip() -> None:
    reg = registry("org.x.a:1.0.0", "org.x.a:2.0.0", "org.x.a:3.0.0", "org.x.a:4.0.0", "org.x.b:1.0.0")
    first = reg.query(None, limit=2, now_ms=NOW)
    assert page_ids(first) == ["org.x.a:4.0.0", "org.x.a:3.0.0"]
    reg.add(desc("org.x.a", "3.5.0"))  # lands before the cursor's position
    reg.add(desc("org.x.a", "1.5.0"))  # lands after it
    reg.add(desc("org.x.aa", "1.0.0"))  # a new name after it
    reg.add(desc("org.x.0", "1.0.0"))  # a new name before it
    rest = reg.query(None, limit=10, cursor=first.next_cursor, now_ms=NOW)
    assert page_ids(rest) == ["org.x.a:2.0.0", "org.x.a:1.0.0", "org.x.b:1.0.0"]  # the listing's snapshot
    assert len(page_ids(reg.query(None, limit=100, now_ms=NOW))) == 9  # a new listing sees them all


def test_bad_cursors_and_changed_filters_are_4001() -> None:
    reg = registry(*(f"org.x.a:1.{i}.0" for i in range(5)), "org.x.b:1.0.0")
    flt = {"capability": "org.x.a"}
    good = reg.query("org.x.a", limit=2, filter=flt, now_ms=NOW).next_cursor
    assert good is not None
    tampered = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
    cases = [("garbage!", flt, "newest-first", NOW), ("", flt, "newest-first", NOW),
             (tampered, flt, "newest-first", NOW),
             (good, {"capability": "org.x.b"}, "newest-first", NOW),  # filter changed
             (good, {"capability": "org.x.a", "version": ">=1.0.0"}, "newest-first", NOW),  # filter grew
             (good, flt, "oldest-first", NOW),  # order changed
             (good, flt, "newest-first", NOW + 11 * 60_000)]  # expired
    for cursor, used_filter, order, now in cases:
        with pytest.raises(AmpError) as info:
            reg.query("org.x.a", limit=2, cursor=cursor, filter=used_filter, order=order, now_ms=now)
        assert info.value.code == 4001, cursor
    foreign: Registry[Descriptor] = Registry(cursor_key=b"another key, another daemon")
    for d in reg:
        foreign.add(d)
    with pytest.raises(AmpError) as info:
        foreign.query("org.x.a", limit=2, cursor=good, filter=flt, now_ms=NOW)
    assert info.value.code == 4001


_NAMES = ["org.a.x", "org.b.y", "org.b.y-z", "org.c.z"]
_versions = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3),
                      st.sampled_from(["", "-rc.1", "-alpha", "+b1", "+b2"]))


def _text(t: tuple[int, int, int, str]) -> str:
    return f"{t[0]}.{t[1]}.{t[2]}{t[3]}"


@settings(max_examples=200, deadline=None)
@given(versions=st.dictionaries(st.sampled_from(_NAMES), st.sets(_versions, min_size=1, max_size=15), min_size=1),
       limits=st.lists(st.integers(1, 6), min_size=1, max_size=8),
       order=st.sampled_from(["newest-first", "oldest-first"]),
       added=st.lists(st.tuples(st.sampled_from(_NAMES + ["org.0.first", "org.z.last"]), _versions), max_size=10),
       name_index=st.one_of(st.none(), st.integers(0, 3)),
       range_text=st.sampled_from([None, ">=1.0.0", "<2.0.0", ">=1.0.0 <3.0.0", ">0.0.0 <=2.2.2"]))
def test_paging_yields_every_match_of_the_snapshot_once_in_order(
        versions: dict[str, set[tuple[int, int, int, str]]], limits: list[int], order: str,
        added: list[tuple[str, tuple[int, int, int, str]]], name_index: int | None, range_text: str | None) -> None:
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    for declared, triples in versions.items():
        for t in triples:
            reg.add(desc(declared, _text(t)))
    name: str | None = None if name_index is None else sorted(versions)[name_index % len(versions)]
    rng = Range.parse(range_text) if range_text else None
    expected = sorted((d for d in reg if (name is None or d.name == name) and (rng is None or rng.contains(d.version))),
                      key=listing_order(order))
    if not expected:
        with pytest.raises(AmpError) as info:
            reg.query(name, version_range=rng, order=order, now_ms=NOW)
        assert info.value.code == (4003 if name is not None else 4002)
        return
    seen: list[str] = []
    cursor = None
    pages = 0
    pending = list(added)
    while True:
        page = reg.query(name, version_range=rng, limit=limits[pages % len(limits)], order=order, cursor=cursor,
                         now_ms=NOW + pages)
        assert 1 <= len(page.items) <= limits[pages % len(limits)]
        pages += 1
        seen += page_ids(page)
        cursor = page.next_cursor
        if cursor is None:
            break
        while pending and random.Random(len(pending)).random() < 0.7:  # the registry grows between pages
            n, t = pending.pop()
            if reg.get(f"{n}:{_text(t)}") is None:
                reg.add(desc(n, _text(t)))
    assert seen == [d.id for d in expected]


# ------------------------------------------------------------- admission


def test_add_declared_is_all_or_nothing() -> None:
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    one, two = desc("org.x.a", "1.0.0").to_wire(), desc("org.x.a", "2.0.0").to_wire()
    assert [d.id for d in reg.add_declared({"capabilities": [one, two]})] == ["org.x.a:1.0.0", "org.x.a:2.0.0"]
    bad = {**desc("org.x.b", "1.0.0").to_wire(), "id": "org.x.b:9.9.9"}  # id != name:version
    for body, code in (({"capabilities": [desc("org.x.c", "1.0.0").to_wire(), bad]}, 4001),
                       ({"capabilities": [desc("org.x.c", "1.0.0").to_wire(), one]}, 4001),  # already registered
                       ({"capabilities": []}, 4001), ({"capabilities": "x"}, 1001), ([], 1001)):
        with pytest.raises(AmpError) as info:
            reg.add_declared(body)
        assert info.value.code == code
    assert [d.id for d in reg] == ["org.x.a:1.0.0", "org.x.a:2.0.0"]  # nothing half-added


# ------------------------------------------------------------- Catalog


def test_catalog_query_uses_the_registry_and_binds_cursors_to_the_filter() -> None:
    catalog = Catalog(demo_manifest().capabilities, cursor_key=KEY)
    first = catalog.query(parse_query_body({"filter": {"capability": "org.ampcap.demo.echo"}, "limit": 2}), NOW)
    assert [d.id for d in first.descriptors] == ["org.ampcap.demo.echo:2.0.0", "org.ampcap.demo.echo:1.1.0"]
    rest = catalog.query(parse_query_body({"filter": {"capability": "org.ampcap.demo.echo"}, "limit": 2,
                                           "cursor": first.next_cursor}), NOW)
    assert [d.id for d in rest.descriptors] == ["org.ampcap.demo.echo:1.0.0"] and rest.next_cursor is None
    with pytest.raises(AmpError) as info:  # same name, but the filter as sent changed (type → capability)
        catalog.query(parse_query_body({"filter": {"type": "echo"}, "cursor": first.next_cursor}), NOW)
    assert info.value.code == 4001
    assert len(catalog) == len(catalog.specs) == len(demo_manifest().capabilities)
    assert catalog.get("org.ampcap.demo.noop:1.0.0") is not None and catalog.get("nope:1.0.0") is None


def test_catalog_refuses_duplicates() -> None:
    specs = demo_manifest().capabilities
    with pytest.raises(ValueError):
        Catalog([*specs, specs[0]], cursor_key=os.urandom(32))


def test_version_key_is_total_for_the_cursor() -> None:
    # The version text a cursor carries parses back to the same position.
    v = Version.parse("1.0.0-rc.1+build.5")
    assert Version.parse(str(v)) == v and Version.parse(str(v)).build == v.build
