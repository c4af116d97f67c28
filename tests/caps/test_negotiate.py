"""Negotiation (RFC 004 §6.3) and compatibility policies (§8): strict,
range, bridge with explicit adapters; the R6 identity conflicts."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.caps.binding.local import PythonBinding
from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.descriptor import Descriptor, SchemaRef
from ampcap.caps.manifest import CapabilitySpec, ManifestError, Policy, manifest_from_data
from ampcap.caps.negotiate import negotiate, policy_of, select
from ampcap.caps.semver import Range, Version
from ampcap.errors import AmpError
from ampcap.caps.bodies import parse_invoke_body

KEY = b"k" * 32
REF = SchemaRef(hash_alg="sha-256", hash=b"\x01" * 32, bundle_id="b", artifact_key="in.json")
v = Version.parse


def spec(name: str, version: str, policy: Policy = Policy.RANGE, **kw: Any) -> CapabilitySpec:
    ranges = kw.pop("supported_ranges", None)
    return CapabilitySpec(descriptor=Descriptor.build(name, version, REF, REF, supported_ranges=ranges),
                          policy=policy, binding=PythonBinding(target="ampcap.caps.demo:noop"), input_schema={},
                          output_schema={}, input_source="inline", output_source="inline", **kw)


def specs(*versions: str, name: str = "org.x.a") -> list[CapabilitySpec]:
    return sorted((spec(name, t) for t in versions), key=lambda s: s.version)


def code_of(fn: Any) -> int:
    with pytest.raises(AmpError) as info:
        fn()
    return info.value.code


# -------------------------------------------------------- selection order


def test_preferred_then_first_acceptable_then_highest_in_range_then_4003() -> None:
    offered = specs("1.0.0", "1.1.0", "1.2.0-rc.1", "2.0.0", "2.1.0")
    assert select(offered, version=None, preferred=v("2.0.0"), acceptable=[v("1.0.0")],
                  range_=Range.parse(">=1.0.0")).spec.id == "org.x.a:2.0.0"
    # acceptable is an ordered list: the first one the provider has wins, not the highest
    assert select(offered, version=None, preferred=v("3.0.0"), acceptable=[v("1.5.0"), v("1.0.0"), v("2.1.0")],
                  range_=Range.parse(">=2.0.0")).spec.id == "org.x.a:1.0.0"
    assert select(offered, version=None, preferred=v("3.0.0"), acceptable=[v("1.5.0")],
                  range_=Range.parse(">=1.0.0 <2.0.0")).spec.id == "org.x.a:1.1.0"  # not the rc (R14)
    assert select(offered, version=None, range_=Range.parse(">=1.2.0-rc.1 <2.0.0")).spec.id == "org.x.a:1.2.0-rc.1"
    assert select(offered, version=None, range_=Range.parse("=2.0.0")).spec.id == "org.x.a:2.0.0"
    assert code_of(lambda: select(offered, version=None, preferred=v("9.0.0"), acceptable=[v("8.0.0")])) == 4003
    assert code_of(lambda: select(offered, version=None)) == 4003  # no hints at all
    assert code_of(lambda: select([], version=None, range_=Range.parse(">=0.0.0"))) == 4003


def test_selection_is_always_a_concrete_declared_id() -> None:
    offered = specs("1.0.0", "1.1.0")
    for kw in (dict(preferred=v("1.1.0")), dict(acceptable=[v("1.0.0")]), dict(range_=Range.parse(">=1.0.0"))):
        chosen = select(offered, version=None, **kw)
        assert chosen.capability_id in {s.id for s in offered} and not chosen.bridged


@settings(max_examples=150, deadline=None)
@given(declared=st.sets(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=30),
       low=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
       high=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
       ops=st.tuples(st.sampled_from([">=", ">", "="]), st.sampled_from(["<", "<=", None])))
def test_range_negotiation_picks_the_highest_declared_version_inside(declared: set[tuple[int, int, int]],
                                                                     low: tuple[int, int, int],
                                                                     high: tuple[int, int, int],
                                                                     ops: tuple[str, str | None]) -> None:
    offered = specs(*(".".join(map(str, t)) for t in declared))
    text = f"{ops[0]}{'.'.join(map(str, low))}" + (f" {ops[1]}{'.'.join(map(str, high))}" if ops[1] else "")
    rng = Range.parse(text)
    inside = [s for s in offered if rng.contains(s.version)]
    if inside:
        assert select(offered, version=None, range_=rng).spec is inside[-1]
    else:
        assert code_of(lambda: select(offered, version=None, range_=rng)) == 4003


# ------------------------------------------------ negotiate(): raw bodies


def test_negotiate_raw_bodies_and_r6_conflicts() -> None:
    offered = specs("2.0.0", "2.1.0", name="org.agentries.code-review")
    assert negotiate({"id": "org.agentries.code-review:2.1.0", "params": {}}, offered).capability_id == \
        "org.agentries.code-review:2.1.0"
    assert negotiate({"capability": "org.agentries.code-review", "version": "2.0.0", "params": {}},
                     offered).capability_id == "org.agentries.code-review:2.0.0"
    assert negotiate({"type": "code-review", "negotiate": {"range": ">=2.0.0 <3.0.0"}, "params": {}},
                     offered).capability_id == "org.agentries.code-review:2.1.0"
    r6: list[dict[str, Any]] = [
        {"id": "org.agentries.code-review:2.1.0", "capability": "org.agentries.translate", "version": "1.0.0",
         "params": {}},  # A.8
        {"id": "org.agentries.code-review:2.1.0", "negotiate": {"preferred": "2.1.0"}, "params": {}},  # A.16
        {"id": "org.agentries.code-review:2.1.0", "version": "2.0.0", "params": {}},
        {"params": {}},  # neither form
        {"capability": "org.agentries.code-review", "params": {}},  # no version, no negotiate
        {"capability": "org.agentries.code-review", "version": "2.1.0", "negotiate": {}, "params": {}},
        {"capability": "org.agentries.code-review", "version": "2.1", "params": {}},  # bad semver (R11)
        {"capability": "org.agentries.code-review", "negotiate": {"range": "^2.0.0"}, "params": {}},
        {"capability": "org.agentries.code-review", "negotiate": {"acceptable": ["2.x"]}, "params": {}},
    ]
    for body in r6:
        assert code_of(lambda: negotiate(body, offered)) == 4001, body
    assert code_of(lambda: negotiate({"capability": "org.agentries.code-review", "version": "3.0.0", "params": {}},
                                     offered)) == 4003
    assert code_of(lambda: negotiate({"capability": "org.agentries.code-review", "negotiate": {"acceptable": 5},
                                      "params": {}}, offered)) == 1001


# ------------------------------------------------------------- policies


def test_policy_defaults_for_bare_descriptors() -> None:
    assert policy_of(Descriptor.build("org.x.a", "1.0.0", REF, REF)) is Policy.STRICT
    assert policy_of(Descriptor.build("org.x.a", "1.0.0", REF, REF,
                                      supported_ranges=(Range.parse(">=1.0.0 <2.0.0"),))) is Policy.RANGE
    assert policy_of(spec("org.x.a", "1.0.0", Policy.BRIDGE)) is Policy.BRIDGE


def test_strict_and_range_never_serve_a_pinned_version_they_do_not_declare() -> None:
    strict = [spec("org.x.a", "1.0.0", Policy.STRICT)]
    ranged = [spec("org.x.a", "1.4.0", Policy.RANGE, supported_ranges=(Range.parse(">=1.0.0 <2.0.0"),))]
    for offered in (strict, ranged):
        assert code_of(lambda: select(offered, version=v("1.2.0"))) == 4003
    assert select(ranged, version=None, range_=Range.parse(">=1.0.0 <2.0.0")).spec.id == "org.x.a:1.4.0"


def _bridge_data(bridge: Any) -> dict[str, Any]:
    return {"capability": [
        {"id": "org.example.greet:1.0.0", "input_schema": {"type": "object"}, "output_schema": {},
         "binding": {"python": "ampcap.caps.demo:noop"}},
        {"id": "org.example.greet:2.0.0", "input_schema": {"type": "object"}, "output_schema": {},
         "policy": "bridge", "supported_ranges": [">=1.0.0 <3.0.0"], "bridge": bridge,
         "notes": "2.0.0 serves 1.x requests: 'name' becomes 'who'; 'greeting' becomes 'text'",
         "binding": {"python": "ampcap.caps.demo:noop"}},
    ]}


def v1_to_v2(params: dict[str, Any], requested: str) -> dict[str, Any]:
    return {"who": params["name"], "from_version": requested}


def v2_to_v1(result: dict[str, Any], requested: str) -> dict[str, Any]:
    return {"greeting": result["text"], "version": requested}


def broken(params: Any, requested: str) -> Any:
    raise KeyError("boom")


def test_bridge_serves_pinned_versions_through_its_adapters_and_logs_shapes(caplog: pytest.LogCaptureFixture) -> None:
    manifest = manifest_from_data(_bridge_data({"params": f"{__name__}:v1_to_v2", "result": f"{__name__}:v2_to_v1"}),
                                  source="<test>")
    catalog = Catalog(manifest.capabilities, cursor_key=KEY)
    request = parse_invoke_body({"capability": "org.example.greet", "version": "1.5.0", "params": {"name": "Ada"}})
    with caplog.at_level(logging.INFO, logger="ampcap.caps"):
        resolved = catalog.check_version(catalog.resolve_identity(request), request)
        assert resolved.adapt_result is not None
        back = resolved.adapt_result({"text": "hello Ada"})
    assert resolved.descriptor.id == "org.example.greet:2.0.0"
    assert resolved.params == {"who": "Ada", "from_version": "1.5.0"}
    assert back == {"greeting": "hello Ada", "version": "1.5.0"}
    messages = [r.getMessage() for r in caplog.records]
    assert any("org.example.greet:1.5.0 params {name} -> org.example.greet:2.0.0 params {from_version, who}" in m
               for m in messages), messages
    assert any("org.example.greet:2.0.0 result {text} -> org.example.greet:1.5.0 result {greeting, version}" in m
               for m in messages), messages
    # A declared version is served as itself: no adapter, in either direction.
    exact = parse_invoke_body({"id": "org.example.greet:1.0.0", "params": {"name": "Bo"}})
    served = catalog.check_version(catalog.resolve_identity(exact), exact)
    assert served.params == {"name": "Bo"} and served.adapt_result is None
    # Outside the bridge's supported_ranges: 4003 (§8, no documented bridge).
    outside = parse_invoke_body({"capability": "org.example.greet", "version": "3.0.0", "params": {}})
    assert code_of(lambda: catalog.check_version(catalog.resolve_identity(outside), outside)) == 4003


def test_bridge_with_a_params_adapter_only_and_a_failing_adapter() -> None:
    catalog = Catalog(manifest_from_data(_bridge_data(f"{__name__}:v1_to_v2"), source="<t>").capabilities,
                      cursor_key=KEY)
    request = parse_invoke_body({"capability": "org.example.greet", "version": "1.0.1", "params": {"name": "Cy"}})
    resolved = catalog.check_version(catalog.resolve_identity(request), request)
    assert resolved.params == {"who": "Cy", "from_version": "1.0.1"}
    assert resolved.adapt_result is None  # no result adapter declared
    failing = Catalog(manifest_from_data(_bridge_data(f"{__name__}:broken"), source="<t>").capabilities,
                      cursor_key=KEY)
    assert code_of(lambda: failing.check_version(failing.resolve_identity(request), request)) == 5001


def test_a_failing_adapter_is_one_throttled_line_from_the_executor_not_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    # Any peer can send the params that make an adapter raise: the executor
    # logs one line under a throttle topic; the traceback waits for -vv.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
    from exec_helpers import ALICE, INVOKE, SEAL, T0, message  # noqa: E402

    from ampcap.caps.params import ParamsValidator
    from ampcap.peer.executor import Executor
    from ampcap.peer.outbound import Log

    manifest = manifest_from_data(_bridge_data(f"{__name__}:broken"), source="<t>")
    catalog = Catalog(manifest.capabilities, cursor_key=KEY)
    executor = Executor(registry=catalog, resolver=catalog, params=ParamsValidator(manifest.schema_store()),
                        seal=SEAL)
    body = {"capability": "org.example.greet", "version": "1.0.1", "params": {"name": "Cy"}}
    with caplog.at_level(logging.INFO, logger="ampcap"):
        actions = executor.handle(message(ALICE, INVOKE, body), "A", T0)
    (line,) = [a for a in actions if isinstance(a, Log) and a.level >= logging.ERROR]
    assert line.level == logging.ERROR and line.topic == f"bridge {__name__}:broken"
    assert "raised KeyError: 'boom'" in line.message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # nothing logged behind its back


@pytest.mark.parametrize("bridge", [None, "no-colon", {"params": "a:b", "extra": "c:d"}, {"result": "a:b"}, 5])
def test_bridge_policy_needs_a_well_formed_adapter(bridge: Any) -> None:
    data = _bridge_data(bridge)
    if bridge is None:
        del data["capability"][1]["bridge"]
    with pytest.raises(ManifestError) as info:
        manifest_from_data(data, source="<test>")
    assert "bridge" in str(info.value)


def test_only_bridge_policy_takes_an_adapter_and_bridges_must_be_documented() -> None:
    data = _bridge_data(f"{__name__}:v1_to_v2")
    data["capability"][1]["policy"] = "range"
    with pytest.raises(ManifestError):
        manifest_from_data(data, source="<test>")
    data = _bridge_data(f"{__name__}:v1_to_v2")
    del data["capability"][1]["notes"]
    with pytest.raises(ManifestError) as info:
        manifest_from_data(data, source="<test>")
    assert "notes" in str(info.value)


def test_demo_echo_negotiation() -> None:
    echo = sorted((s for s in demo_manifest().capabilities if s.name == "org.ampcap.demo.echo"),
                  key=lambda s: s.version)
    assert select(echo, version=None, range_=Range.parse(">=1.0.0 <2.0.0")).spec.id == "org.ampcap.demo.echo:1.1.0"
    assert select(echo, version=v("1.0.0")).spec.id == "org.ampcap.demo.echo:1.0.0"
    assert code_of(lambda: select(echo, version=v("1.5.0"))) == 4003
