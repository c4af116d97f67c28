"""The baseline of ``tools/bench_http.py``: an MCP server (the SDK's
``MCPServer``) with one echo tool, over its streamable HTTP transport.

Prints ``READY <port>`` on stdout once it listens; SIGTERM stops it.

    python tools/mcp_echo_baseline.py
"""

from __future__ import annotations

import socket
import sys
import threading
import time


def main() -> None:
    from mcp.server.mcpserver import MCPServer

    with socket.socket() as probe:  # a free port for uvicorn
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = MCPServer("echo-baseline")

    @server.tool()
    def echo(message: str) -> str:
        """Return the message."""
        return message

    def announce() -> None:  # once uvicorn accepts connections
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        print(f"READY {port}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run("streamable-http", host="127.0.0.1", port=port)  # the SDK's defaults: SSE responses, sessions


if __name__ == "__main__":
    sys.exit(main())
