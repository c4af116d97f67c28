"""The Python API example (docs/python-api.md) runs and does what it says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_hello_agent_example() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "hello_agent.py")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("serving at amp://127.0.0.1:") and "did:key:z6Mk" in lines[0]
    assert lines[1] == "declared: ['org.example.greet:1.0.0']"
    assert lines[2] == "{'greeting': 'Hello, Ada.'}"
    assert "  progress 100% 3 of 3" in lines and "{'counted': 3}" in lines
    assert lines[-1].startswith("as expected: 4003 VERSION_MISMATCH")


def test_the_api_docs_show_the_example_as_it_is() -> None:
    readme = (ROOT / "docs" / "python-api.md").read_text()
    marker = "`examples/hello_agent.py` (the tests run it"
    block = readme[readme.index("```python\n", readme.index(marker)) + len("```python\n"):]
    block = block[:block.index("```\n")]
    example = (ROOT / "examples" / "hello_agent.py").read_text()
    assert example.endswith(block) and example[:-len(block)].rstrip().endswith('"""')  # all but the docstring


def test_top_level_api_is_lazy() -> None:
    code = "import sys, ampcap.wire.cbor; assert 'trio' not in sys.modules; import ampcap; ampcap.Peer; " \
           "assert 'trio' in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_the_binding_examples_run() -> None:
    """examples/bindings/: an MCP, an HTTP and a gRPC binding, each served
    and invoked (run.py starts the example servers it needs)."""
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "bindings" / "run.py")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mcp:  {'words': 6, 'longest': 'not'} progress 33% 67% 100%",
        "http: {'lang': 'fr', 'text': 'bonjour'}",
        "http: 4001 BAD_REQUEST: 127.0.0.1:${TRANSLATE_PORT} answered HTTP 404",
        "grpc: {'sum': '42'}",
    ]


def test_the_binding_manifests_validate() -> None:
    for name in ("mcp.toml", "http.toml", "grpc.toml"):
        done = subprocess.run([sys.executable, "-m", "ampcap.cli.main", "caps", "validate", "--no-connect",
                               str(ROOT / "examples" / "bindings" / name)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.startswith("OK "), done.stdout + done.stderr
