"""The suite registry: every required vector has a runner or a reason, and a
plug-in module's vectors join every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampcap.interop import suite
from ampcap.interop.codec import CODEC_CHECKS, appendix_a
from ampcap.interop.judge import Status, passed
from ampcap.interop.runner import run_vectors
from ampcap.interop.vectors import Context, Vector, demo_subject
from ampcap.interop.probe import ProbeSettings

ROOT = Path(__file__).resolve().parents[2]


def test_the_suite_list_is_the_suites_own() -> None:
    shared = ROOT.parent / "shared" / "conformance" / "vector-set.json"
    if not shared.exists():
        shared = Path("/work/shared/conformance/vector-set.json")
    if not shared.exists():
        pytest.skip("the suite's vector-set.json is not beside the checkout")
    assert list(suite.REQUIRED_VECTORS) == json.loads(shared.read_text())["required_vectors"]


def test_the_packaged_vector_data_is_the_tests_transcription() -> None:
    assert appendix_a() == json.loads((ROOT / "tests" / "vectors" / "rfc001" / "appendix_a.json").read_text())


def test_the_byte_vectors_pass_against_our_codec() -> None:
    assert {vid: check().status for vid, (_, check) in CODEC_CHECKS.items()} == {
        "001:A.1": Status.PASS, "001:A.2": Status.PASS, "001:A.6": Status.PASS}


def test_natural_order() -> None:
    ids = ["004:A.10", "001:hello", "004:A.2", "001:A.6", "003:A.15", "003:A.5", "007:A.17a", "007:A.9"]
    assert sorted(ids, key=suite.vector_key) == ["001:A.6", "001:hello", "003:A.5", "003:A.15", "004:A.2",
                                                 "004:A.10", "007:A.9", "007:A.17a"]


@pytest.mark.trio
async def test_a_registered_vector_runs_and_its_not_implemented_skip_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    async def v005_a4(ctx: Context) -> object:
        return passed("plugged in")

    monkeypatch.setattr(suite, "_REGISTERED", {})
    before = await run_vectors(None, ProbeSettings(timeout_s=0.5), demo_subject(), only=["005:A.4"])
    assert [(r.vector_id, r.status, r.notes) for r in before.results] == [
        ("005:A.4", Status.SKIP, "not implemented yet (RFC 005 delegation vectors)")]
    suite.register(Vector("005:A.4", "a plug-in", v005_a4), suite.Where.SELF)
    with pytest.raises(ValueError):
        suite.register(Vector("005:A.4", "twice", v005_a4))
    assert "005:A.4" in suite.known_ids()
    after = await run_vectors(None, ProbeSettings(timeout_s=0.5), demo_subject(), only=["005:A.4"], self_test=True)
    assert [(r.vector_id, r.status, r.notes) for r in after.results] == [("005:A.4", Status.PASS, "plugged in")]
