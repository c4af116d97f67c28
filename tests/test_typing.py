"""The package ships ``py.typed``, so its annotations are a promise to its
users: mypy, configured in pyproject.toml, must find nothing in ``src/``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_src_is_type_clean() -> None:
    pytest.importorskip("mypy", reason="mypy comes with the [test] extra")
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
