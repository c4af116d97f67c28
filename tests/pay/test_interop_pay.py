"""The RFC 007 vectors of ``ampcap interop`` (interop/pay_vectors.py) against
ampcap's own payee (``--self`` serves ``serve --demo --payments``), and
against a real ``ampcap serve --demo --payments`` process: every one passes,
the five the suite requires included, and the report lists them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ampcap.interop.pay_vectors import PAY_VECTORS

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

REQUIRED = {"007:A.9", "007:A.17a", "007:A.17b", "007:A.18", "007:A.21"}


def _interop(tmp: Path, *args: str) -> dict[str, dict[str, str]]:
    report = tmp / f"report-{len(list(tmp.iterdir()))}.json"
    done = subprocess.run([sys.executable, "-m", "ampcap.cli.main", "interop", *args, "--report", str(report)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config")))
    assert report.exists(), done.stderr
    data = json.loads(report.read_text())
    return {r["vector_id"]: r for r in data["results"]}


def test_self_passes_every_payment_vector(tmp_path: Path) -> None:
    results = _interop(tmp_path, "--self")
    ids = {v.id for v in PAY_VECTORS}
    assert REQUIRED <= ids
    assert {vid: results[vid]["status"] for vid in ids} == {vid: "pass" for vid in ids}, \
        {vid: results[vid] for vid in ids if results[vid]["status"] != "pass"}


def test_a_served_payee_passes_every_payment_vector(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--payments", "--state-dir", "none") as daemon:
        args = [daemon.url]
        for vid in sorted(REQUIRED | {"007:A.1", "007:A.3"}):
            args += ["--vector", vid]
        results = _interop(tmp_path, *args)
    for vid in REQUIRED | {"007:A.1", "007:A.3"}:
        assert results[vid]["status"] == "pass", results[vid]


def test_a19_passes_against_a_payee_whose_policy_denies_its_caller_and_is_skipped_otherwise(tmp_path: Path) -> None:
    """007:A.19 calls as a fixed identity; a real ``serve --policy`` that
    denies it answers 3001 before delegation; one that admits it is skipped,
    the report naming the DID to deny (never a false pass or fail)."""
    from ampcap.interop.pay_vectors import A19_DENIED_DID

    policy = tmp_path / "policy.toml"
    policy.write_text(f'default = "allow"\ndeny = ["{A19_DENIED_DID}"]\n')
    with serve_process(tmp_path, "--payments", "--state-dir", "none", "--policy", str(policy)) as daemon:
        denied = _interop(tmp_path, daemon.url, "--vector", "007:A.19")["007:A.19"]
    assert denied["status"] == "pass", denied
    with serve_process(tmp_path, "--payments", "--state-dir", "none") as daemon:
        admitted = _interop(tmp_path, daemon.url, "--vector", "007:A.19")["007:A.19"]
    assert admitted["status"] == "skip" and A19_DENIED_DID in json.dumps(admitted), admitted
