"""Names, aliases and OSSA URIs; the registry's order, filters and cursors;
negotiation and bridges; usage statistics. RFC 004 Appendix A vectors at
this layer are named in the test names (A.1, A.2, ...)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.manifest import manifest_from_data
from ampcap.caps.names import AliasTable, is_capability_name, parse_capability_id, parse_ossa_uri
from ampcap.caps.negotiate import select
from ampcap.caps.registry import Registry
from ampcap.caps.semver import Range, Version
from ampcap.caps.stats import UsageStats
from ampcap.errors import AmpError
from ampcap.peer.progress import parse_invoke_body, parse_query_body

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


# ------------------------------------------------------------------ names


def test_names_and_ids() -> None:
    assert is_capability_name("org.example.tool") and is_capability_name("Org.Example.Tool")
    assert not is_capability_name("tool") and not is_capability_name("org..x") and not is_capability_name(".org.x")
    assert parse_capability_id("org.example.tool:1.2.3-rc.1+b5") == ("org.example.tool", Version.parse("1.2.3-rc.1+b5"))
    for bad in ("org.example.tool", "tool:1.0.0", "org.example.tool:1.0", ":1.0.0"):
        with pytest.raises(AmpError) as info:
            parse_capability_id(bad)
        assert info.value.code == 4001


def test_ossa_and_mcp_uris_map_to_rfc004_names_and_a_range_policy() -> None:
    ref = parse_ossa_uri("ossa:security/scan_vulnerabilities@1.2")
    assert ref is not None
    assert (ref.name, str(ref.version), ref.capability_id) == (
        "ossa.security.scan_vulnerabilities", "1.2.0", "ossa.security.scan_vulnerabilities:1.2.0")
    assert ref.compatible.contains(Version.parse("1.7.3")) and ref.compatible.contains(Version.parse("1.2.0"))
    assert not ref.compatible.contains(Version.parse("1.1.9")) and not ref.compatible.contains(Version.parse("2.0.0"))
    mcp = parse_ossa_uri("mcp:github/create_issue@0.3")
    assert mcp is not None and mcp.name == "mcp.github.create_issue" and mcp.uri == "mcp:github/create_issue@0.3"
    assert parse_ossa_uri("org.example.tool") is None
    for bad in ("ossa:security/scan@1", "ossa:/x@1.0", "mcp:srv/tool@01.0", "ossa:a/b/c@1.0"):
        with pytest.raises(AmpError) as info:
            parse_ossa_uri(bad)
        assert info.value.code == 4001


def test_aliases_resolve_with_one_deprecation_warning(caplog: pytest.LogCaptureFixture) -> None:
    table = AliasTable(["org.example.new"], {"org.example.old": "org.example.new", "old": "org.example.new"})
    with caplog.at_level(logging.WARNING, logger="ampcap.caps"):
        assert table.resolve("org.example.old") == "org.example.new"
        assert table.resolve("org.example.old") == "org.example.new"
        assert table.resolve("org.example.new") == "org.example.new"
        assert table.resolve("unknown") == "unknown"
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["capability alias 'org.example.old' is deprecated: use 'org.example.new'"]
    assert table.aliases_of("org.example.new") == ["old", "org.example.old"]
    with pytest.raises(AmpError):
        table.add_alias("org.example.new", "org.example.other")  # a name cannot become an alias
    with pytest.raises(AmpError):
        table.add_alias("old", "org.example.other")  # nor one alias point two ways


# ---------------------------------------------------- registry and pages


def test_a14_pages_are_name_asc_version_desc_without_gaps() -> None:
    reg = registry("org.x.a:1.0.0", "org.x.a:2.0.0", "org.x.a:1.5.0", "org.x.a:0.9.0", "org.x.a:1.5.1")
    seen: list[str] = []
    cursor = None
    while True:
        page = reg.query("org.x.a", limit=2, cursor=cursor, filter={"capability": "org.x.a"}, now_ms=NOW)
        assert len(page.items) <= 2
        seen += page_ids(page)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ["org.x.a:2.0.0", "org.x.a:1.5.1", "org.x.a:1.5.0", "org.x.a:1.0.0", "org.x.a:0.9.0"]
    oldest = reg.query("org.x.a", order="oldest-first", now_ms=NOW)
    assert page_ids(oldest) == list(reversed(seen)) and oldest.next_cursor is None


def test_all_names_listing_orders_by_name_then_version() -> None:
    reg = registry("org.b.x:1.0.0", "org.a.x:1.0.0", "org.a.x:2.0.0", "org.c.x:0.1.0")
    assert page_ids(reg.query(None, now_ms=NOW)) == ["org.a.x:2.0.0", "org.a.x:1.0.0", "org.b.x:1.0.0",
                                                     "org.c.x:0.1.0"]


def test_additions_between_pages_neither_duplicate_nor_skip() -> None:
    reg = registry("org.x.a:1.0.0", "org.x.a:2.0.0", "org.x.a:3.0.0", "org.x.a:4.0.0")
    first = reg.query("org.x.a", limit=2, now_ms=NOW)
    assert page_ids(first) == ["org.x.a:4.0.0", "org.x.a:3.0.0"]
    reg.add(desc("org.x.a", "3.5.0"))  # lands before the cursor's position
    reg.add(desc("org.x.a", "1.5.0"))  # lands after it
    rest = reg.query("org.x.a", limit=10, cursor=first.next_cursor, now_ms=NOW)
    assert page_ids(rest) == ["org.x.a:2.0.0", "org.x.a:1.0.0"]  # the listing's snapshot
    assert len(page_ids(reg.query("org.x.a", limit=10, now_ms=NOW))) == 6  # a new listing sees them


def test_range_filter_and_the_4002_4003_codes() -> None:
    reg = registry("org.x.a:1.0.0", "org.x.a:1.4.0", "org.x.a:2.0.0")
    assert page_ids(reg.query("org.x.a", version_range=Range.parse(">=1.1.0 <2.0.0"), now_ms=NOW)) == ["org.x.a:1.4.0"]
    with pytest.raises(AmpError) as info:
        reg.query("org.agentries.nonexistent", now_ms=NOW)  # A.17
    assert info.value.code == 4002
    with pytest.raises(AmpError) as info:
        reg.query("org.x.a", version_range=Range.parse(">=3.0.0 <4.0.0"), now_ms=NOW)
    assert info.value.code == 4003


def test_a15_bad_cursors_are_4001() -> None:
    reg = registry(*(f"org.x.a:1.{i}.0" for i in range(5)))
    flt = {"capability": "org.x.a"}
    good = reg.query("org.x.a", limit=2, filter=flt, now_ms=NOW).next_cursor
    assert good is not None
    tampered = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
    foreign: Registry[Descriptor] = Registry(cursor_key=b"another key, another daemon")
    for d in reg:
        foreign.add(d)
    cases = [("garbage!", flt, NOW), ("", flt, NOW), (tampered, flt, NOW), (good, {"capability": "org.x.b"}, NOW),
             (good, flt, NOW + 11 * 60_000)]
    for cursor, used_filter, now in cases:
        with pytest.raises(AmpError) as info:
            reg.query("org.x.a", limit=2, cursor=cursor, filter=used_filter, now_ms=now)
        assert info.value.code == 4001, cursor
    with pytest.raises(AmpError) as info:
        foreign.query("org.x.a", limit=2, cursor=good, filter=flt, now_ms=NOW)
    assert info.value.code == 4001
    with pytest.raises(AmpError):  # order is bound too
        reg.query("org.x.a", limit=2, cursor=good, filter=flt, order="oldest-first", now_ms=NOW)


@settings(max_examples=60, deadline=None)
@given(versions=st.dictionaries(st.sampled_from(["org.a.x", "org.b.y", "org.c.z"]),
                                st.sets(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
                                        min_size=1, max_size=12), min_size=1),
       limit=st.integers(1, 5), order=st.sampled_from(["newest-first", "oldest-first"]),
       added=st.lists(st.tuples(st.sampled_from(["org.a.x", "org.b.y", "org.c.z"]), st.integers(4, 9),
                                st.integers(0, 9)), max_size=6),
       all_names=st.booleans())
def test_paging_yields_every_match_once_in_order(versions: dict[str, set[tuple[int, int, int]]], limit: int,
                                                 order: str, added: list[tuple[str, int, int]],
                                                 all_names: bool) -> None:
    reg: Registry[Descriptor] = Registry(cursor_key=KEY)
    for name, triples in versions.items():
        for t in triples:
            reg.add(desc(name, ".".join(map(str, t))))
    name = None if all_names else sorted(versions)[0]
    expected = sorted((d for d in reg if name is None or d.name == name),
                      key=lambda d: (d.name, d.version if order == "oldest-first" else _neg(d.version)))
    seen: list[str] = []
    cursor = None
    pending = list(added)
    while True:
        page = reg.query(name, limit=limit, order=order, cursor=cursor, now_ms=NOW)
        seen += page_ids(page)
        cursor = page.next_cursor
        if cursor is None:
            break
        if pending:  # the registry grows between pages
            n, major, minor = pending.pop()
            if reg.get(f"{n}:{major}.{minor}.0") is None:
                reg.add(desc(n, f"{major}.{minor}.0"))
    assert seen == [d.id for d in expected]


class _neg:
    """Sort key wrapper reversing a Version's order (name ASC, version DESC)."""

    def __init__(self, v: Version) -> None:
        self.v = v

    def __lt__(self, other: _neg) -> bool:
        return other.v < self.v


# ------------------------------------------------------------ negotiation

SPECS = sorted((s for s in demo_manifest().capabilities if s.name == "org.ampcap.demo.echo"), key=lambda s: s.version)


def choose(**kw: Any) -> str:
    return str(select(SPECS, **kw).spec.version)


def test_a2_a3_a4_negotiation() -> None:
    v = Version.parse
    two = [s for s in SPECS]  # declared: 1.0.0, 1.1.0, 2.0.0
    assert choose(version=None, preferred=v("2.0.0")) == "2.0.0"  # A.2: exact preferred
    assert choose(version=None, preferred=v("2.2.0"), acceptable=[v("1.1.0"), v("1.0.0")]) == "1.1.0"  # A.3
    assert choose(version=None, range_=Range.parse(">=1.0.0 <2.0.0")) == "1.1.0"  # highest in range
    with pytest.raises(AmpError) as info:  # A.4
        select(two, version=None, range_=Range.parse(">=3.0.0 <4.0.0"))
    assert info.value.code == 4003
    with pytest.raises(AmpError) as info:  # a pinned version that is not declared
        select(two, version=v("1.5.0"))
    assert info.value.code == 4003
    assert choose(version=v("1.0.0")) == "1.0.0"


def _bridge_manifest() -> Any:
    data = {"capability": [
        {"id": "org.example.greet:1.0.0", "input_schema": {"type": "object"}, "output_schema": {},
         "binding": {"python": "ampcap.caps.demo:noop"}},
        {"id": "org.example.greet:2.0.0", "input_schema": {"type": "object"}, "output_schema": {},
         "policy": "bridge", "supported_ranges": [">=1.0.0 <3.0.0"], "bridge": f"{__name__}:v1_to_v2",
         "notes": "2.0.0 serves 1.x requests: 'name' becomes 'who'", "binding": {"python": "ampcap.caps.demo:noop"}},
    ]}
    return manifest_from_data(data, source="<test>")


def v1_to_v2(params: dict[str, Any], requested: str) -> dict[str, Any]:
    return {"who": params["name"], "from_version": requested}


def test_bridge_serves_pinned_versions_through_its_adapter_and_logs_shapes(caplog: pytest.LogCaptureFixture) -> None:
    catalog = Catalog(_bridge_manifest().capabilities, cursor_key=KEY)
    request = parse_invoke_body({"capability": "org.example.greet", "version": "1.5.0", "params": {"name": "Ada"}})
    with caplog.at_level(logging.INFO, logger="ampcap.caps"):
        resolved = catalog.check_version(catalog.resolve_identity(request), request)
    assert resolved.descriptor.id == "org.example.greet:2.0.0"
    assert resolved.params == {"who": "Ada", "from_version": "1.5.0"}
    assert any("{name} -> org.example.greet:2.0.0 params {from_version, who}" in r.getMessage() for r in caplog.records)
    exact = parse_invoke_body({"id": "org.example.greet:1.0.0", "params": {"name": "Bo"}})
    assert catalog.check_version(catalog.resolve_identity(exact), exact).params == {"name": "Bo"}
    outside = parse_invoke_body({"capability": "org.example.greet", "version": "3.0.0", "params": {}})
    with pytest.raises(AmpError) as info:
        catalog.check_version(catalog.resolve_identity(outside), outside)
    assert info.value.code == 4003


def test_bridge_policy_needs_an_adapter() -> None:
    from ampcap.caps.manifest import ManifestError

    data = {"capability": [{"id": "org.example.greet:2.0.0", "input_schema": {}, "output_schema": {},
                            "policy": "bridge", "supported_ranges": [">=1.0.0 <3.0.0"], "notes": "n",
                            "binding": {"python": "ampcap.caps.demo:noop"}}]}
    with pytest.raises(ManifestError) as info:
        manifest_from_data(data, source="<test>")
    assert "bridge" in str(info.value)


def test_a7_legacy_type_query_resolves_through_the_alias() -> None:
    catalog = Catalog(demo_manifest().capabilities, cursor_key=KEY)
    page = catalog.query(parse_query_body({"filter": {"type": "echo"}}), NOW)
    assert [d.name for d in page.descriptors] == ["org.ampcap.demo.echo"] * 3
    request = parse_invoke_body({"type": "ossa:demo/add@1.0", "version": "1.0.0", "params": {"a": 1, "b": 2}})
    assert catalog.resolve_identity(request)[0].id == "org.ampcap.demo.math.add:1.0.0"


def test_catalog_refuses_duplicates() -> None:
    specs = demo_manifest().capabilities
    with pytest.raises(ValueError):
        Catalog([*specs, specs[0]], cursor_key=os.urandom(32))


# -------------------------------------------------------------- statistics


def test_usage_statistics_per_capability_id() -> None:
    stats = UsageStats(window=100)
    for ms in range(1, 201):
        stats.record("org.x.a:1.0.0", latency_ms=float(ms), code=None if ms % 10 else 5001)
    stats.record("org.x.b:1.0.0", latency_ms=5.0, code=4004)
    a = stats.get("org.x.a:1.0.0")
    assert (a.calls, a.successes, dict(a.failures)) == (200, 180, {5001: 20})
    assert a.success_rate == pytest.approx(0.9) and a.mean_latency_ms == pytest.approx(100.5)
    assert 198 <= a.p99_latency_ms <= 200  # over the last `window` calls, which are 101..200
    b = stats.get("org.x.b:1.0.0")
    assert (b.calls, b.successes, dict(b.failures)) == (1, 0, {4004: 1})
    assert stats.get("org.x.none:1.0.0") is None
    assert [s.capability_id for s in stats.snapshot()] == ["org.x.a:1.0.0", "org.x.b:1.0.0"]


_triples = st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4))


@settings(max_examples=150, deadline=None)
@given(declared=st.sets(_triples, min_size=1, max_size=30), low=_triples, high=_triples,
       ops=st.tuples(st.sampled_from([">=", ">"]), st.sampled_from(["<", "<="])))
def test_range_negotiation_picks_the_highest_declared_version_inside(declared: set[tuple[int, int, int]],
                                                                     low: tuple[int, int, int],
                                                                     high: tuple[int, int, int],
                                                                     ops: tuple[str, str]) -> None:
    specs = sorted((s for s in _specs_for(declared)), key=lambda s: s.version)
    rng = Range.parse(f"{ops[0]}{'.'.join(map(str, low))} {ops[1]}{'.'.join(map(str, high))}")
    inside = [s for s in specs if rng.contains(s.version)]
    if inside:
        assert select(specs, version=None, range_=rng).spec is inside[-1]
    else:
        with pytest.raises(AmpError):
            select(specs, version=None, range_=rng)


def _specs_for(triples: set[tuple[int, int, int]]) -> list[Any]:
    from ampcap.caps.bindings import PythonBinding
    from ampcap.caps.manifest import CapabilitySpec, Policy

    return [CapabilitySpec(descriptor=desc("org.x.a", ".".join(map(str, t))), policy=Policy.RANGE,
                           binding=PythonBinding(target="ampcap.caps.demo:noop"), input_schema={}, output_schema={},
                           input_source="inline", output_source="inline") for t in triples]


def test_ossa_uri_ids_in_manifests_and_requests() -> None:
    data = {"capability": [{"id": "ossa:security/scan_vulnerabilities@1.2", "input_schema": {}, "output_schema": {},
                            "binding": {"python": "ampcap.caps.demo:noop"}}]}
    spec = manifest_from_data(data, source="<test>").capabilities[0]
    assert spec.id == "ossa.security.scan_vulnerabilities:1.2.0"
    assert [r.text for r in spec.descriptor.supported_ranges or ()] == [">=1.2.0 <2.0.0"]  # OSSA's rule as range
    catalog = Catalog([spec], cursor_key=KEY)
    request = parse_invoke_body({"capability": "ossa:security/scan_vulnerabilities@1.2",
                                 "negotiate": {"range": ">=1.2.0 <2.0.0"}, "params": {}})
    assert catalog.resolve_identity(request)[0].id == spec.id
    assert catalog.canonical_name("ossa:security/other@1.0") == "ossa:security/other@1.0"  # not served: 4002 later
