"""A small real HTTP server for the binding tests (stdlib, in a thread).

Routes:
  POST /echo/<rest>    200 {"path", "query", "body", "x_key"} of the request
  GET  /status/<n>     that status, with a JSON body
  GET  /drop           promises 1000 bytes, sends 10, closes the connection
  GET  /slow           waits up to 5 s for the client to go away; records it
  GET  /text           200 text/plain
  GET  /empty          204
Every request is counted in ``hits`` by path.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Recorder:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.aborted = threading.Event()
        self.requests: list[dict[str, object]] = []


def _handler(rec: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _json(self, status: int, doc: object) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            rec.hits[parts.path.split("/")[1]] += 1
            rec.requests.append({"path": parts.path, "body": body.decode(), "headers": dict(self.headers)})
            if parts.path.startswith("/echo/"):
                self._json(200, {"path": urllib.parse.unquote(parts.path), "query": parts.query,
                                 "body": json.loads(body) if body else None, "x_key": self.headers.get("X-Key"),
                                 "method": self.command})
            elif parts.path.startswith("/status/"):
                self._json(int(parts.path.split("/")[2]), {"error": "as asked"})
            elif parts.path == "/drop":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"partial"')
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
            elif parts.path == "/slow":
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    ready, _, _ = select.select([self.connection], [], [], 0.05)
                    if ready and self.connection.recv(1, socket.MSG_PEEK) == b"":
                        rec.aborted.set()
                        self.close_connection = True
                        return
                self._json(200, {"late": True})
            elif parts.path == "/text":
                data = b"not json"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif parts.path == "/empty":
                self.send_response(204)
                self.end_headers()
            else:
                self._json(404, {})

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _route

    return Handler


@contextmanager
def http_server() -> Iterator[tuple[str, Recorder]]:
    rec = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", rec
    finally:
        server.shutdown()
        server.server_close()
