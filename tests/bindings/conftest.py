"""The MCP test server over streamable HTTP, shared by a module's tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import MCP_SERVER, PYTHON, free_port, wait_for_port  # noqa: E402


@pytest.fixture(scope="module")
def mcp_http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The MCP test server over streamable HTTP, for the module's tests."""
    port = free_port()
    marks = tmp_path_factory.mktemp("marks")
    process = subprocess.Popen([PYTHON, str(MCP_SERVER), "http", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "AMPCAP_TEST_MARKS": str(marks)})
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)
