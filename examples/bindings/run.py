"""Each binding kind of examples/bindings/, end to end (the tests run it).

python3 examples/bindings/run.py

Starts the example implementations (the MCP server is started by ampcap
itself, from mcp.toml; the HTTP API and the gRPC service here, on free
ports), serves each manifest from an ampcap daemon in turn, and invokes its
capability as a remote agent would. Needs pip install 'ampcap[bindings]'.
"""

import os
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ampcap.caps.manifest import Manifest, manifest_from_data
from ampcap.decoders import toml_loads
from ampcap.files.manifest import DiskFiles
from ampcap import Peer, connect
from ampcap.wire.identity import Identity

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import grpc_server  # noqa: E402
import http_server  # noqa: E402


def manifest(name: str, patch: Callable[[dict[str, Any]], None] | None = None) -> Manifest:
    """A manifest file of this directory, loaded as serve --manifest loads it
    (after ``patch``: what only this run can know, a port, the interpreter)."""
    data = toml_loads((HERE / name).read_text())
    if patch:
        patch(data)
    return manifest_from_data(data, source=str(HERE / name), files=DiskFiles(HERE), check_bindings=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main() -> None:
    # The HTTP API, on a free port; the manifest reads the port and the token
    # from the environment (${TRANSLATE_PORT}, ${TRANSLATE_TOKEN}).
    api = http_server.make_server(0)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    os.environ["TRANSLATE_PORT"] = str(api.server_address[1])
    os.environ["TRANSLATE_TOKEN"] = "example-token"
    # The gRPC service, on a free port (the manifest's target is patched to it).
    calc, port = grpc_server.make_server(free_port())
    calc.start()

    def this_python(data: dict[str, Any]) -> None:
        # Run the MCP server with this interpreter, which has the MCP SDK.
        data["mcp_server"]["words"]["command"][0] = sys.executable

    def calc_port(data: dict[str, Any]) -> None:
        data["capability"][0]["binding"]["grpc"]["target"] = f"127.0.0.1:{port}"

    # One daemon per manifest, in turn: each serves and is invoked as a
    # remote agent would invoke it.
    async with Peer(Identity.generate(os.urandom), manifest=manifest("mcp.toml", this_python)).serve("amp://127.0.0.1:0") as server, \
            connect(server.url, identity=Identity.generate(os.urandom)) as remote:  # a caller of its own
        seen: list[str] = []
        got = await remote.invoke("org.example.words.count:1.0.0", params={"text": "to be or not to be"},
                                  on_progress=lambda pct, text: seen.append(f"{pct}%"))
        print("mcp: ", got, "progress", " ".join(seen))
    async with Peer(Identity.generate(os.urandom), manifest=manifest("http.toml")).serve("amp://127.0.0.1:0") as server, \
            connect(server.url, identity=Identity.generate(os.urandom)) as remote:  # a caller of its own
        print("http:", await remote.invoke("org.example.translate:1.0.0", params={"text": "hello", "lang": "fr"}))
        try:
            await remote.invoke("org.example.translate:1.0.0", params={"text": "hello", "lang": "xx"})
        except Exception as exc:  # an AmpError: the 404, mapped
            print("http:", exc)
    async with Peer(Identity.generate(os.urandom), manifest=manifest("grpc.toml", calc_port)).serve("amp://127.0.0.1:0") as server, \
            connect(server.url, identity=Identity.generate(os.urandom)) as remote:  # a caller of its own
        print("grpc:", await remote.invoke("org.example.calc.add:1.0.0", params={"x": 40, "y": 2}))
    calc.stop(0)
    api.shutdown()


if __name__ == "__main__":
    trio.run(main)
