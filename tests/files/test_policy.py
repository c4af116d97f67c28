"""Policy files: read, parsed, and every way one can fail named with its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampcap.errors import AmpError
from ampcap.files.policy import load_policy


def test_load_policy_from_file(tmp_path: Path) -> None:
    good = tmp_path / "policy.toml"
    good.write_text('default = "deny"\nallow = ["did:key:*"]\n')
    assert load_policy(good).caller_allowed("did:key:z6Mk") and load_policy(good).source == str(good)
    bad = tmp_path / "bad.toml"
    bad.write_text("default = \n")
    with pytest.raises(AmpError, match="bad.toml: not valid TOML"):
        load_policy(bad)
    with pytest.raises(AmpError, match="cannot read policy file"):
        load_policy(tmp_path / "missing.toml")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(AmpError, match="not UTF-8"):
        load_policy(binary)
