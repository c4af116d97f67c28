"""The RFC 005 interop vectors pass against ampcap itself and appear in the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_interop_self_runs_the_rfc005_vectors(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "ampcap.cli.main", "interop", "--self", "--vector", "005:A.4",
                          "--vector", "005:A.14", "--vector", "005:A.20", "--report", str(report)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for vid in ("005:A.4", "005:A.14", "005:A.20"):
        assert f"{vid}" in out.stdout
    assert "3 passed, 0 failed" in out.stdout
    doc = json.loads(report.read_text())
    assert "005:A.20" in json.dumps(doc)
