"""Fixtures for the dump tests: run ``ampcap dump`` in-process, and build
keyrings for the RFC 001 vectors and the Rust example captures."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from ampcap.cli import dump as dump_cli

ROOT = Path(__file__).resolve().parents[2]
RFC001 = json.loads((ROOT / "tests" / "vectors" / "rfc001" / "appendix_a.json").read_text())
CAPTURES = ROOT.parent / "shared" / "captures" / "rust-example"
if not CAPTURES.exists():  # CI clones main with shared/ beside it
    CAPTURES = Path("/work/shared/captures/rust-example")


def run_dump(argv: list[str], stdin: bytes = b"") -> tuple[int, str]:
    """Parse ``argv`` with the dump's own parser and run it in-process."""
    parser = argparse.ArgumentParser(prog="ampcap")
    dump_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dump", *argv])
    out = io.StringIO()
    code = dump_cli.run(args, stdin=io.BytesIO(stdin), stdout=out)
    return code, out.getvalue()


def json_records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def rfc001_keyring(tmp_path: Path) -> Path:
    """Both example DIDs map to the Appendix A.1 key."""
    common = RFC001["common"]
    path = tmp_path / "rfc001-keyring.json"
    path.write_text(json.dumps({
        common["from"]: {"ed25519": common["ed25519_public"]},
        common["to"]: {"ed25519": common["ed25519_public"]},
    }))
    return path


def demo_keyring(tmp_path: Path) -> Path:
    """The Rust example's demo identities with their secrets (seeds are 32
    copies of one byte)."""
    demo = json.loads((CAPTURES / "demo-keys.json").read_text())
    ring = {did: {"ed25519": e["ed25519"], "x25519": e["x25519"],
                  "ed25519_secret": e["ed25519_seed_byte"] * 32,
                  "x25519_secret": e["x25519_secret_byte"] * 32} for did, e in demo.items()}
    path = tmp_path / "demo-keyring.json"
    path.write_text(json.dumps(ring))
    return path


@pytest.fixture
def dump() -> Callable[..., tuple[int, str]]:
    return run_dump


@pytest.fixture
def rfc001_ring(tmp_path: Path) -> Path:
    return rfc001_keyring(tmp_path)


@pytest.fixture
def demo_ring(tmp_path: Path) -> Path:
    return demo_keyring(tmp_path)


@pytest.fixture
def jrecords() -> Callable[[str], list[dict[str, Any]]]:
    return json_records


@pytest.fixture
def rfc001() -> dict[str, Any]:
    return RFC001


@pytest.fixture
def captures() -> Path:
    return CAPTURES
