"""The demo capability set behaves as the spec-map table says."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ampcap.caps.demo import MAX_SLEEP_MS, DemoFailure, add, current_time, demo_manifest, echo, fail, noop, sleep
from ampcap.caps.manifest import Policy
from ampcap.caps.params import ParamsValidator
from ampcap.errors import AmpError

IDS = {
    "org.ampcap.demo.echo:1.0.0", "org.ampcap.demo.echo:1.1.0", "org.ampcap.demo.echo:2.0.0",
    "org.ampcap.demo.math.add:1.0.0", "org.ampcap.demo.sleep:1.0.0", "org.ampcap.demo.fail:1.0.0",
    "org.ampcap.demo.current_time:1.0.0", "org.ampcap.demo.noop:1.0.0",
}
# 2026-11-22T11:05:00.123Z
NOW_MS = 1_795_345_500_123


@dataclass
class FakeContext:
    capability_id: str = "org.ampcap.demo.x:1.0.0"
    version: str = "1.0.0"
    slept: list[int] = field(default_factory=list)
    reports: list[tuple[float | None, str | None]] = field(default_factory=list)

    def now_ms(self) -> int:
        return NOW_MS

    async def sleep(self, ms: int) -> None:
        self.slept.append(ms)

    async def progress(self, percent: float | None, message: str | None = None) -> None:
        self.reports.append((percent, message))


@pytest.fixture(scope="module")
def manifest():  # type: ignore[no-untyped-def]
    return demo_manifest()


def validator_check(manifest: Any, cap_id: str, params: Any) -> None:
    spec = manifest.find(cap_id)[0]
    ParamsValidator(manifest.schema_store()).validate_params(spec.descriptor, params)


def test_exact_id_set(manifest: Any) -> None:
    assert {c.id for c in manifest.capabilities} == IDS


def test_aliases(manifest: Any) -> None:
    assert {c.id for c in manifest.find("echo")} == {i for i in IDS if ".echo:" in i}
    assert [c.id for c in manifest.find("ossa:demo/add@1.0")] == ["org.ampcap.demo.math.add:1.0.0"]


def test_descriptors_are_offline_and_verifiable(manifest: Any) -> None:
    store = manifest.schema_store()
    for spec in manifest.capabilities:
        spec.descriptor.check_offline_profile()
        assert store.load_json(spec.descriptor.input_schema) == spec.input_schema
        assert spec.policy in (Policy.STRICT, Policy.RANGE)


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0", "2.0.0"])
def test_echo(version: str) -> None:
    out = echo({"message": "héllo"}, FakeContext(version=version))
    expected: dict[str, Any] = {"message": "héllo", "version": version}
    if version == "2.0.0":
        expected["length"] = 5
    assert out == expected


def test_add_and_noop() -> None:
    assert add({"a": 2, "b": 0.5}) == {"sum": 2.5}
    assert noop({}) is None


def test_fail_raises() -> None:
    with pytest.raises(DemoFailure):
        fail({})


@pytest.mark.trio
async def test_sleep_reports_progress_and_returns() -> None:
    ctx = FakeContext()
    assert await sleep({"ms": 2500}, ctx) == {"slept_ms": 2500}
    assert sum(ctx.slept) == 2500
    assert len(ctx.reports) == len(ctx.slept) >= 3
    assert ctx.reports[-1][0] == 100.0
    assert [p for p, _ in ctx.reports] == sorted(p for p, _ in ctx.reports)


@pytest.mark.trio
async def test_sleep_zero() -> None:
    ctx = FakeContext()
    assert await sleep({"ms": 0}, ctx) == {"slept_ms": 0}
    assert ctx.slept == []


def test_current_time_formats() -> None:
    ctx = FakeContext()
    assert current_time({}, ctx) == {"time": "2026-11-22T11:05:00.123+00:00"}
    assert current_time({"format": "unix"}, ctx) == {"time": NOW_MS // 1000}
    assert current_time({"timezone": "Europe/Paris"}, ctx)["time"] == "2026-11-22T12:05:00.123+01:00"
    human = current_time({"timezone": "America/New_York", "format": "human"}, ctx)["time"]
    assert human == "Sunday, 22 November 2026, 06:05:00 EST"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "/etc/localtime", ""])
def test_current_time_unknown_zone(zone: str) -> None:
    with pytest.raises(AmpError) as info:
        current_time({"timezone": zone}, FakeContext())
    assert info.value.code == 4004


@pytest.mark.parametrize(
    ("cap_id", "params"),
    [
        ("org.ampcap.demo.echo:1.0.0", {}),
        ("org.ampcap.demo.echo:2.0.0", {"message": 3}),
        ("org.ampcap.demo.math.add:1.0.0", {"a": 1}),
        ("org.ampcap.demo.math.add:1.0.0", {"a": "1", "b": 2}),
        ("org.ampcap.demo.sleep:1.0.0", {"ms": MAX_SLEEP_MS + 1}),
        ("org.ampcap.demo.sleep:1.0.0", {"ms": -1}),
        ("org.ampcap.demo.sleep:1.0.0", {"ms": 1.5}),
        ("org.ampcap.demo.current_time:1.0.0", {"format": "rfc2822"}),
        ("org.ampcap.demo.noop:1.0.0", {"x": 1}),
        ("org.ampcap.demo.fail:1.0.0", []),
    ],
)
def test_schema_violations(manifest: Any, cap_id: str, params: Any) -> None:
    with pytest.raises(AmpError) as info:
        validator_check(manifest, cap_id, params)
    assert info.value.code == 4004


@pytest.mark.parametrize(
    ("cap_id", "params"),
    [
        ("org.ampcap.demo.echo:1.1.0", {"message": ""}),
        ("org.ampcap.demo.math.add:1.0.0", {"a": -1.5, "b": 10**20}),
        ("org.ampcap.demo.sleep:1.0.0", {"ms": MAX_SLEEP_MS}),
        ("org.ampcap.demo.current_time:1.0.0", {}),
        ("org.ampcap.demo.current_time:1.0.0", {"timezone": "UTC", "format": "human"}),
        ("org.ampcap.demo.noop:1.0.0", {}),
        ("org.ampcap.demo.fail:1.0.0", {}),
    ],
)
def test_schema_accepts(manifest: Any, cap_id: str, params: Any) -> None:
    validator_check(manifest, cap_id, params)


def test_outputs_match_output_schemas(manifest: Any) -> None:
    v = ParamsValidator(manifest.schema_store())
    ctx = FakeContext(version="2.0.0")
    samples = {
        "org.ampcap.demo.echo:2.0.0": echo({"message": "x"}, ctx),
        "org.ampcap.demo.math.add:1.0.0": add({"a": 1, "b": 2}),
        "org.ampcap.demo.current_time:1.0.0": current_time({"format": "unix"}, ctx),
        "org.ampcap.demo.noop:1.0.0": noop({}),
    }
    for cap_id, result in samples.items():
        assert v.validate_result(manifest.find(cap_id)[0].descriptor, result) == [], cap_id
