"""Capability names, ids, OSSA/MCP URIs and aliases (RFC 004 §4.1, R12,
spec map "Capability naming")."""

from __future__ import annotations

import logging

import pytest

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.manifest import manifest_from_data
from ampcap.caps.names import AliasTable, is_capability_name, parse_capability_id, parse_ossa_uri
from ampcap.caps.semver import Version
from ampcap.errors import AmpError
from ampcap.caps.bodies import parse_invoke_body

KEY = b"k" * 32


def test_names_are_reverse_domain_and_case_sensitive() -> None:
    for good in ("org.agentries.code-review", "com.acme.risk-evaluator", "Org.Example.Tool", "a.b", "x.y_z.0"):
        assert is_capability_name(good), good
    for bad in ("tool", "org..x", ".org.x", "org.x.", "org.x y", "org.x:1", "", "-org.x", "org.-x"):
        assert not is_capability_name(bad), bad
    assert not is_capability_name(42)  # type: ignore[arg-type]
    # Case-sensitive byte comparison (§4.1): two names, two capabilities.
    table = AliasTable(["org.example.Tool"])
    assert table.resolve("org.example.tool") == "org.example.tool"  # unchanged: unknown → 4002 later


def test_ids_parse_into_name_and_full_semver() -> None:
    assert parse_capability_id("org.agentries.code-review:2.1.0") == ("org.agentries.code-review", Version(2, 1, 0))
    name, version = parse_capability_id("org.example.tool:1.2.3-rc.1+b5")
    assert name == "org.example.tool" and str(version) == "1.2.3-rc.1+b5"
    for bad in ("org.example.tool", "tool:1.0.0", "org.example.tool:1.0", ":1.0.0", "org.example.tool:",
                "org.example.tool:v1.0.0", "org.example.tool:01.0.0", 7):
        with pytest.raises(AmpError) as info:
            parse_capability_id(bad)  # type: ignore[arg-type]
        assert info.value.code == 4001, bad


def test_ossa_uri_maps_to_name_version_and_range_policy() -> None:
    ref = parse_ossa_uri("ossa:security/scan_vulnerabilities@1.0")
    assert ref is not None
    assert (ref.scheme, ref.domain, ref.local, ref.major, ref.minor) == ("ossa", "security", "scan_vulnerabilities", 1, 0)
    # The spec map's example: ossa.security.scan_vulnerabilities, version 1.0.0.
    assert (ref.name, str(ref.version)) == ("ossa.security.scan_vulnerabilities", "1.0.0")
    assert ref.capability_id == "ossa.security.scan_vulnerabilities:1.0.0"
    assert ref.uri == "ossa:security/scan_vulnerabilities@1.0"
    assert is_capability_name(ref.name)


def test_ossa_compatibility_rule_is_same_major_minor_at_least() -> None:
    ref = parse_ossa_uri("ossa:security/scan_vulnerabilities@1.2")
    assert ref is not None and ref.compatible.text == ">=1.2.0 <2.0.0"
    inside = ["1.2.0", "1.2.9", "1.7.3", "1.99.0"]
    outside = ["1.1.9", "2.0.0", "0.9.0", "1.3.0-beta"]  # R14: no pre-releases unless named
    assert all(ref.compatible.contains(Version.parse(v)) for v in inside)
    assert not any(ref.compatible.contains(Version.parse(v)) for v in outside)


def test_mcp_uris_and_malformed_uris() -> None:
    mcp = parse_ossa_uri("mcp:github/create_issue@0.3")
    assert mcp is not None and mcp.name == "mcp.github.create_issue" and str(mcp.version) == "0.3.0"
    assert mcp.compatible.text == ">=0.3.0 <1.0.0"
    assert parse_ossa_uri("org.example.tool") is None and parse_ossa_uri("https://x/y") is None
    for bad in ("ossa:security/scan@1", "ossa:/x@1.0", "mcp:srv/tool@01.0", "ossa:a/b/c@1.0", "ossa:a/b@1.0.0",
                "mcp:srv/tool", "ossa:a b/c@1.0", "ossa:a/b@1.\u0662", "ossa:a/b@1.0\n"):
        with pytest.raises(AmpError) as info:
            parse_ossa_uri(bad)
        assert info.value.code == 4001, bad


def test_aliases_resolve_to_the_canonical_name_with_a_deprecation_warning(caplog: pytest.LogCaptureFixture) -> None:
    table = AliasTable(["org.example.new"], {"org.example.old": "org.example.new", "old": "org.example.new"})
    with caplog.at_level(logging.WARNING, logger="ampcap.caps"):
        assert table.resolve("org.example.old") == "org.example.new"
        assert table.resolve("org.example.old") == "org.example.new"  # warned once per alias, not per call
        assert table.resolve("old") == "org.example.new"
        assert table.resolve("org.example.new") == "org.example.new"  # canonical: no warning
        assert table.resolve("unknown") == "unknown"
    assert [r.getMessage() for r in caplog.records] == [
        "capability alias 'org.example.old' is deprecated: use 'org.example.new'",
        "capability alias 'old' is deprecated: use 'org.example.new'",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    assert table.aliases_of("org.example.new") == ["old", "org.example.old"]
    assert table.is_alias("old") and not table.is_alias("org.example.new")


def test_alias_conflicts_are_4001() -> None:
    table = AliasTable(["org.example.new", "org.example.other"], {"old": "org.example.new"})
    for alias, name in (("org.example.new", "org.example.other"),  # a name cannot become an alias
                        ("old", "org.example.other"),  # nor one alias point two ways
                        ("org.example.other", "org.example.other")):
        with pytest.raises(AmpError) as info:
            table.add_alias(alias, name)
        assert info.value.code == 4001
    with pytest.raises(AmpError):
        table.add_name("old")  # an alias cannot become a name
    table.add_alias("old", "org.example.new")  # the same mapping again is fine


def test_undeclared_ossa_uri_names_its_rfc004_counterpart() -> None:
    table = AliasTable(["ossa.security.scan_vulnerabilities"])
    assert table.resolve("ossa:security/scan_vulnerabilities@1.0") == "ossa.security.scan_vulnerabilities"
    assert table.resolve("ossa:security/other@1.0") == "ossa:security/other@1.0"  # not served: 4002 later
    assert table.resolve("ossa:bad") == "ossa:bad"  # resolve never raises


def test_legacy_type_and_renamed_names_resolve_and_replies_are_canonical(caplog: pytest.LogCaptureFixture) -> None:
    catalog = Catalog(demo_manifest().capabilities, cursor_key=KEY)
    with caplog.at_level(logging.WARNING, logger="ampcap.caps"):
        request = parse_invoke_body({"type": "echo", "version": "1.1.0", "params": {"message": "hi"}})
        resolved = catalog.check_version(catalog.resolve_identity(request), request)
    assert resolved.descriptor.name == "org.ampcap.demo.echo"
    assert resolved.descriptor.to_wire()["name"] == "org.ampcap.demo.echo"  # what CAP_DECLARE/logs carry
    assert catalog.canonical_name("ossa:demo/add@1.0") == "org.ampcap.demo.math.add"
    assert any("'echo' is deprecated" in r.getMessage() for r in caplog.records)


def test_ossa_uri_ids_in_manifests_become_rfc004_ids_with_a_range_policy() -> None:
    data = {"capability": [{"id": "ossa:security/scan_vulnerabilities@1.2", "input_schema": {}, "output_schema": {},
                            "binding": {"python": "ampcap.caps.demo:noop"}}]}
    spec = manifest_from_data(data, source="<test>").capabilities[0]
    assert spec.id == "ossa.security.scan_vulnerabilities:1.2.0"
    assert spec.policy.value == "range"
    assert [r.text for r in spec.descriptor.supported_ranges or ()] == [">=1.2.0 <2.0.0"]
    catalog = Catalog([spec], cursor_key=KEY)
    request = parse_invoke_body({"capability": "ossa:security/scan_vulnerabilities@1.2",
                                 "negotiate": {"range": ">=1.2.0 <2.0.0"}, "params": {}})
    assert catalog.resolve_identity(request)[0].id == spec.id
