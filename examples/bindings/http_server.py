"""A tiny JSON API for examples/bindings/http.toml (stdlib only).

python3 examples/bindings/http_server.py PORT      # needs: Authorization: Bearer example-token
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        if self.headers.get("Authorization") != "Bearer example-token":
            return self.answer(401, {"error": "unauthorized"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/translate" or body.get("to") not in ("fr", "de"):
            return self.answer(404, {"error": "no such language"})
        words = {"fr": {"hello": "bonjour"}, "de": {"hello": "hallo"}}[body["to"]]
        self.answer(200, {"translation": words.get(body["text"], body["text"]), "lang": body["to"]})

    def answer(self, status: int, doc: object) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_server(port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


if __name__ == "__main__":
    make_server(int(sys.argv[1])).serve_forever()
