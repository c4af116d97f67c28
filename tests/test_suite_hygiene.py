"""The suite removes what it writes to the temporary directory (issue 38
item 15): a run leaves nothing there, and a test that leaves something
fails the run (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_PROBE = "AMPCAP_HYGIENE_PROBE"


@pytest.mark.skipif(_PROBE not in os.environ, reason="only run inside test_a_leaking_test_fails_the_run")
def test_probe_that_leaks() -> None:
    tempfile.mkdtemp(prefix="ampcap-leaked-")


def _pytest_run(tmp: Path, target: str, probe: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AMPCAP_TEST_KEEP_STATE_HOME", _PROBE)}
    env["TMPDIR"] = str(tmp)
    env["PYTHONPATH"] = str(ROOT / "src")
    if probe:
        env[_PROBE] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_run_leaves_nothing_in_the_temporary_directory(tmp_path: Path) -> None:
    # A test that uses tmp_path and XDG_STATE_HOME, as the daemon tests do.
    done = _pytest_run(tmp_path, "tests/test_readme.py::test_readme_links_resolve", probe=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_leaking_test_fails_the_run(tmp_path: Path) -> None:
    done = _pytest_run(tmp_path, "tests/test_suite_hygiene.py::test_probe_that_leaks", probe=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "tests left these in the temporary directory" in done.stdout
    assert "ampcap-leaked-" in done.stdout
    assert list(tmp_path.iterdir()) == []
