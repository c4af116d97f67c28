"""RFC 002 §5–§7 against a real ``ampcap serve --demo --http``: ampcap's own
clients (the Python API over http:// and ws://), plain httpx, and a
WebSocket client written here on wsproto and a blocking socket (so the
server is not only checked by the code that shares its adapter)."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    RejectConnection,
    Request,
    TextMessage,
)

import ampcap
from ampcap.wire import cbor
from ampcap.wire.bearer import mint
from ampcap.wire.envelope import decode_envelope, seal
from ampcap.wire.httpmap import decode_poll
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import serve_process  # noqa: E402

ECHO = {"capability": "org.ampcap.demo.echo", "version": "1.0.0", "params": {"message": "hi"}}
SLEEP_MS = 2300  # longer than the server's 2 s sync wait: answered 202, then polled


class Server:
    def __init__(self, http_url: str, did: str) -> None:
        self.http = http_url
        self.ws = "ws" + http_url[len("http"):]
        self.did = did
        host, port = http_url.removeprefix("http://").rsplit(":", 1)
        self.addr = (host, int(port))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("http")
    with serve_process(tmp, "--http", "127.0.0.1:0") as proc:
        assert proc.proc.stdout is not None
        line = proc.proc.stdout.readline().strip()  # printed with the first: already buffered
        http_url, did = line.split()
        assert http_url.startswith("http://127.0.0.1:") and did == proc.did
        yield Server(http_url, did)


def _now() -> int:
    return int(time.time() * 1000)


def _message(ident: Identity, server: Server, typ: int, body: Any, *, msg_id: bytes | None = None,
             ts: int | None = None) -> bytes:
    _, wire = seal(ident, typ=typ, to=server.did, body=body, now_ms=ts or _now(), entropy=os.urandom,
                   ttl=60_000, message_id=msg_id)
    return wire


def _headers(token: str | None) -> dict[str, str]:
    headers = {"content-type": "application/cbor", "x-amp-transport-version": "1"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return headers


def _token(ident: Identity, server: Server, now_ms: int | None = None) -> str:
    return mint(ident, server.did, now_ms=now_ms or _now(), entropy=os.urandom)


def _post(server: Server, body: bytes, token: str | None) -> httpx.Response:
    return httpx.post(server.http + "/amp/v1/messages", content=body, headers=_headers(token), timeout=10)


# ------------------------------------------------------- ampcap's clients


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_python_api_over_http_and_websocket(server: Server, scheme: str) -> None:
    url = server.http if scheme == "http" else server.ws

    async def main() -> None:
        async with ampcap.connect(url, identity=Identity.generate(os.urandom)) as remote:
            assert remote.did == server.did
            assert await remote.invoke("org.ampcap.demo.echo", version="1.0.0", params={"message": "x"}) == \
                {"message": "x", "version": "1.0.0"}
            found = await remote.query("org.ampcap.demo.echo")
            assert len(found) == 3
            with pytest.raises(ampcap.AmpError) as failed:
                await remote.invoke("org.ampcap.demo.math.add", version="1.0.0", params={"a": "no"})
            assert failed.value.code == 4004

    trio.run(main)


def test_star_listing_over_websocket_but_not_over_http_post(server: Server) -> None:
    """R22: a WebSocket runs HELLO with its extensions, so "*" lists; the
    HTTP POST binding's HELLO_ACK agrees none, so the caller refuses "*"
    locally, and the daemon answers a POSTed "*" 4002 (an HTTP principal
    has no HELLO-agreed extensions) rather than listing."""
    from ampcap.peer.listing import NOT_OFFERED

    async def main() -> None:
        async with ampcap.connect(server.ws, identity=Identity.generate(os.urandom)) as remote:
            assert len(await remote.query("*")) > 3
        async with ampcap.connect(server.http, identity=Identity.generate(os.urandom)) as remote:
            with pytest.raises(ampcap.AmpError) as refused:
                await remote.query("*")
            assert (refused.value.code, refused.value.message) == (4002, NOT_OFFERED)
            daemon, link = remote._daemon, remote._link  # sent anyway, as a caller ignoring R22 would
            handle, out = daemon.invoker.start_query(link, {"capability": "*"}, limit=None, cursor=None, order=None,
                                                     timeout_ms=10_000, to=link.peer_did,
                                                     now_ms=daemon.clock.wall_ms())
            with pytest.raises(ampcap.AmpError) as answered:
                await daemon.calls._await(handle, daemon.calls.register(link, handle, out, None))
            assert (answered.value.code, answered.value.message) == (4002, "no capability named '*'")

    trio.run(main)


def test_python_api_over_http_waits_for_a_polled_reply(server: Server) -> None:
    async def main() -> None:
        async with ampcap.connect(server.http, identity=Identity.generate(os.urandom)) as remote:
            result = await remote.invoke("org.ampcap.demo.sleep", version="1.0.0", params={"ms": SLEEP_MS})
            assert result == {"slept_ms": SLEEP_MS}

    trio.run(main)


def test_endpoint_list_prefers_wss_and_falls_back_from_an_unreachable_one(server: Server) -> None:
    from ampcap.net.transport.url import parse_endpoints

    order = parse_endpoints("https://a.example,wss://b.example,amps://c.example")
    assert [u.scheme for u in order] == ["amps", "wss", "https"]

    async def main() -> None:
        # amp:// on a closed port is tried first (§3.5) and skipped; then ws.
        urls = f"{server.http},amp://127.0.0.1:1,{server.ws}"
        async with ampcap.connect(urls, identity=Identity.generate(os.urandom)) as remote:
            assert await remote.invoke("org.ampcap.demo.noop", version="1.0.0") is None

    trio.run(main)


# --------------------------------------------------------- plain HTTP


def test_post_hello_then_invoke_with_a_token_answers_200(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    hello = _post(server, _message(ident, server, MessageType.HELLO, {"versions": ["1.0"]}), None)
    assert hello.status_code == 200 and hello.headers["content-type"] == "application/cbor"
    assert int(hello.headers["x-amp-max-message-size"]) >= 1 << 20  # §3.2, §5.3
    ack = decode_envelope(hello.content, cbor.DEFAULT_LIMITS)
    assert ack.typ == MessageType.HELLO_ACK and ack.sender == server.did
    reply = _post(server, _message(ident, server, MessageType.CAP_INVOKE, ECHO), _token(ident, server))
    assert reply.status_code == 200
    env = decode_envelope(reply.content, cbor.DEFAULT_LIMITS)
    assert env.typ == MessageType.CAP_RESULT and env.to == ident.did


def test_a_posted_extension_message_is_answered_1005(server: Server) -> None:
    """An HTTP POST agrees no ampcap extension (no HELLO of its own), so a
    POSTed cancel is a type this agent does not take from it: ERROR 1005,
    not a dropped connection (the dispatch asked the POST's reply sink for
    a connection it does not have)."""
    ident = Identity.generate(os.urandom)
    cancel = _message(ident, server, MessageType.EXTENSION, {"ampcap": "cancel", "invoke": bytes(16)})
    reply = _post(server, cancel, _token(ident, server))
    assert reply.status_code == 200
    env = decode_envelope(reply.content, cbor.DEFAULT_LIMITS)
    assert env.typ == MessageType.ERROR and env.body["code"] == 1005


def test_missing_expired_and_foreign_tokens_are_refused(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    invoke = _message(ident, server, MessageType.CAP_INVOKE, ECHO)
    missing = _post(server, invoke, None)
    assert missing.status_code == 401 and missing.headers["x-amp-error-code"] == "3001"
    expired = _post(server, invoke, _token(ident, server, now_ms=_now() - 10 * 60_000))
    assert expired.status_code == 401 and "expired" in expired.text
    other_audience = mint(ident, "did:web:someone.else", now_ms=_now(), entropy=os.urandom)
    assert _post(server, invoke, other_audience).status_code == 401
    forged = _token(ident, server)
    head, claims, sig = forged.split(".")
    assert _post(server, invoke, f"{head}.{claims}.{sig[::-1]}").status_code == 401


def test_wrong_principal_is_403_and_nothing_runs(server: Server) -> None:
    alice, bob = Identity.generate(os.urandom), Identity.generate(os.urandom)
    from_bob = _message(bob, server, MessageType.CAP_INVOKE, ECHO)
    refused = _post(server, from_bob, _token(alice, server))
    assert refused.status_code == 403 and refused.headers["x-amp-error-code"] == "3001"
    # Bob's own token is accepted for the same bytes: the refusal did not consume them.
    assert _post(server, from_bob, _token(bob, server)).status_code == 200


def test_oversize_body_is_413_and_malformed_body_400(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    with socket.create_connection(server.addr, timeout=10) as sock:
        # The declared length alone is refused: nothing is read (Appendix A.5).
        sock.sendall(b"POST /amp/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/cbor\r\n"
                     b"Content-Length: %d\r\n\r\n" % ((16 << 20) + 1))
        head = sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 413") and b"x-amp-error-code: 1001" in head
    # Without a token only a HELLO may come: a large body is not even read.
    assert _post(server, bytes(70_000), None).status_code == 413
    bad = _post(server, b"\xa1\x61x\x01", _token(ident, server))
    assert bad.status_code == 400 and bad.headers["x-amp-error-code"] == "1001"
    text = httpx.post(server.http + "/amp/v1/messages", content=b"{}", timeout=10,
                      headers={"content-type": "application/json"})
    assert text.status_code == 415
    assert httpx.get(server.http + "/elsewhere", timeout=10).status_code == 404


def _poll(server: Server, token: str, cursor: str | None = None) -> tuple[list[bytes], str | None, bool]:
    params = {"limit": "10"} | ({"cursor": cursor} if cursor is not None else {})
    response = httpx.get(server.http + "/amp/v1/messages", params=params, headers=_headers(token), timeout=10)
    assert response.status_code == 200
    return decode_poll(response.content)


def test_poll_after_202_and_a_replayed_cursor_redelivers(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    token = _token(ident, server)
    sleep = {"capability": "org.ampcap.demo.sleep", "version": "1.0.0", "params": {"ms": SLEEP_MS}}
    accepted = _post(server, _message(ident, server, MessageType.CAP_INVOKE, sleep), token)
    assert accepted.status_code == 202
    start, _, _ = _poll(server, token)
    cursor0 = None
    result: bytes | None = None
    deadline = time.monotonic() + 10
    while result is None and time.monotonic() < deadline:
        messages, cursor, _ = _poll(server, token, cursor0)
        for raw in messages:
            if decode_envelope(raw, cbor.DEFAULT_LIMITS).typ == MessageType.CAP_RESULT:
                result = raw
        if result is None:
            cursor0 = cursor or cursor0
            time.sleep(0.1)
        else:
            after = cursor
    assert result is not None
    # Moving on acknowledges; the next poll has nothing new.
    messages, cursor2, more = _poll(server, token, after)
    assert messages == [] and not more and cursor2 == after
    # The earlier cursor, replayed within the window, gets the same bytes again.
    again, _, _ = _poll(server, token, cursor0)
    assert result in again
    with pytest.raises(AssertionError):
        _poll(server, token, "nonsense")  # 400
    with pytest.raises(AssertionError):
        _poll(server, token, (after or "x.1").split(".")[0] + ".999999999")  # past anything issued


def test_two_hundred_concurrent_pollers(server: Server) -> None:
    idents = [Identity.generate(os.urandom) for _ in range(20)]
    tokens = [_token(ident, server) for ident in idents]

    async def main() -> None:
        statuses: list[int] = []
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=server.http, limits=limits, timeout=30) as client:
            async def one(i: int) -> None:
                response = await client.get("/amp/v1/messages", params={"limit": "5"},
                                            headers=_headers(tokens[i % len(tokens)]))
                decode_poll(response.content)
                statuses.append(response.status_code)

            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(one, i)
        assert statuses == [200] * 200

    trio.run(main)


# ----------------------------------------------------------- WebSocket


class WsClient:
    """A minimal blocking WebSocket client on wsproto."""

    def __init__(self, server: Server, *, token: str | None = None, subprotocols: list[str] | None = None,
                 max_size: int | None = None) -> None:
        self.sock = socket.create_connection(server.addr, timeout=10)
        self.ws = WSConnection(ConnectionType.CLIENT)
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        if max_size is not None:
            headers.append((b"x-amp-max-message-size", str(max_size).encode()))
        self.sock.sendall(self.ws.send(Request(host="x", target="/amp/v1/ws", extra_headers=headers,
                                               subprotocols=["amp.v1"] if subprotocols is None else subprotocols)))
        self.handshake = self._next()

    def _next(self) -> Any:
        while True:
            for event in self.ws.events():
                return event
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)
            if not data:
                for event in self.ws.events():
                    return event
                return None

    def send(self, payload: bytes) -> None:
        self.sock.sendall(self.ws.send(Message(data=payload)))

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(Message(data=text)))

    def receive(self) -> Any:
        event = self._next()
        if isinstance(event, BytesMessage):
            parts = [bytes(event.data)]
            while not event.message_finished:
                event = self._next()
                parts.append(bytes(event.data))
            return b"".join(parts)
        return event

    def close(self) -> None:
        self.sock.close()


def _hello(ident: Identity, server: Server, ws: WsClient) -> None:
    ws.send(_message(ident, server, MessageType.HELLO, {"versions": ["1.0"]}))
    ack = ws.receive()
    assert isinstance(ack, bytes) and decode_envelope(ack, cbor.DEFAULT_LIMITS).typ == MessageType.HELLO_ACK


def test_websocket_needs_the_amp_subprotocol(server: Server) -> None:
    ws = WsClient(server, subprotocols=["chat"])
    assert isinstance(ws.handshake, RejectConnection) and ws.handshake.status_code == 400
    ws.close()


def test_websocket_text_frame_is_closed_1003(server: Server) -> None:
    ws = WsClient(server)
    assert isinstance(ws.handshake, AcceptConnection) and ws.handshake.subprotocol == "amp.v1"
    ws.send_text("hello")
    closing = ws.receive()
    assert isinstance(closing, CloseConnection) and closing.code == 1003
    ws.close()


def test_websocket_oversize_message_is_closed_1009(server: Server) -> None:
    ws = WsClient(server, max_size=1 << 20)  # effective max: 1 MiB (Appendix A.5)
    ident = Identity.generate(os.urandom)
    _hello(ident, server, ws)
    ws.send(b"\x00" * ((1 << 20) + 1))
    closing = ws.receive()
    assert isinstance(closing, CloseConnection) and closing.code == 1009
    ws.close()


def test_websocket_principal_mismatch_is_closed_1008(server: Server) -> None:
    alice, bob = Identity.generate(os.urandom), Identity.generate(os.urandom)
    ws = WsClient(server, token=_token(alice, server))
    ws.send(_message(bob, server, MessageType.HELLO, {"versions": ["1.0"]}))
    closing = ws.receive()
    assert isinstance(closing, CloseConnection) and closing.code == 1008
    ws.close()
    # After HELLO, a message from another DID ends the connection the same way.
    ws = WsClient(server)
    _hello(alice, server, ws)
    ws.send(_message(bob, server, MessageType.CAP_INVOKE, ECHO))
    events = [ws.receive(), ws.receive()]
    assert any(isinstance(e, CloseConnection) and e.code == 1008 for e in events)
    ws.close()


def test_websocket_message_before_hello_is_refused(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    ws = WsClient(server)
    ws.send(_message(ident, server, MessageType.CAP_INVOKE, ECHO))
    error = ws.receive()
    assert isinstance(error, bytes)
    env = decode_envelope(error, cbor.DEFAULT_LIMITS)
    assert env.typ == MessageType.ERROR and env.body["code"] == 1004  # RFC 002 A.7
    ws.close()


def test_invoke_posted_over_http_and_retried_over_websocket_runs_once(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    token = _token(ident, server)
    sleep = {"capability": "org.ampcap.demo.sleep", "version": "1.0.0", "params": {"ms": SLEEP_MS}}
    invoke = _message(ident, server, MessageType.CAP_INVOKE, sleep)
    assert _post(server, invoke, token).status_code == 202  # still running after the sync wait
    ws = WsClient(server, token=token)
    _hello(ident, server, ws)
    ws.send(invoke)  # the same bytes: a retry (R8)
    over_ws = None
    while over_ws is None:
        raw = ws.receive()
        assert isinstance(raw, bytes)
        if decode_envelope(raw, cbor.DEFAULT_LIMITS).typ == MessageType.CAP_RESULT:
            over_ws = raw
    ws.close()
    polled: list[bytes] = []
    deadline = time.monotonic() + 5
    while not polled and time.monotonic() < deadline:
        polled = [m for m in _poll(server, token)[0]
                  if decode_envelope(m, cbor.DEFAULT_LIMITS).typ == MessageType.CAP_RESULT]
        time.sleep(0.05)
    # One run: the duplicate waited for the first run's outcome (R8); each
    # binding got it, sealed for it, with the same body.
    assert len(polled) == 1
    first, second = (decode_envelope(raw, cbor.DEFAULT_LIMITS) for raw in (polled[0], over_ws))
    assert first.reply_to == second.reply_to and first.body == second.body == {
        "status": "success", "result": {"slept_ms": SLEEP_MS}}


def test_completed_invoke_retried_over_websocket_gets_the_cached_outcome(server: Server) -> None:
    ident = Identity.generate(os.urandom)
    token = _token(ident, server)
    clock = {"capability": "org.ampcap.demo.current_time", "version": "1.0.0", "params": {"format": "unix"}}
    invoke = _message(ident, server, MessageType.CAP_INVOKE, clock)
    over_http = _post(server, invoke, token)
    assert over_http.status_code == 200
    time.sleep(1.1)  # a second run would tell another time
    ws = WsClient(server, token=token)
    _hello(ident, server, ws)
    ws.send(invoke)
    again = ws.receive()
    ws.close()
    assert isinstance(again, bytes)
    first, second = (decode_envelope(raw, cbor.DEFAULT_LIMITS) for raw in (over_http.content, again))
    # The time it told the first time: the cached outcome, not a second run.
    assert second.typ == MessageType.CAP_RESULT and second.reply_to == first.reply_to
    assert second.body == first.body and first.body["status"] == "success"


@pytest.mark.parametrize("scheme, expected", [
    ("ws", {"001:1002": "PASS", "002:A.5": "PASS", "002:A.7": "PASS", "004:A.2": "PASS", "002:A.2": "SKIP"}),
    ("http", {"001:1002": "PASS", "002:A.5": "PASS", "002:A.7": "SKIP", "004:A.2": "PASS", "002:A.2": "SKIP"}),
])
def test_interop_runs_over_websocket_and_http(server: Server, tmp_path: Path, scheme: str,
                                              expected: dict[str, str]) -> None:
    import json
    import subprocess

    url = server.ws if scheme == "ws" else server.http
    report = tmp_path / "report.json"
    args = [sys.executable, "-m", "ampcap.cli.main", "interop", url, "--report", str(report)]
    for vector in expected:
        args += ["--vector", vector]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    for vector, result in expected.items():
        assert any(line.split()[:2] == [vector, result] for line in done.stdout.splitlines()), done.stdout
    assert json.loads(report.read_text())


def test_websocket_keepalive_pings_and_closes_a_silent_peer() -> None:
    from wsproto.events import Ping

    from ampcap.caps.demo import demo_manifest
    from ampcap.net.transport.http_server import HttpConfig, HttpFront
    from ampcap.net.api.peer import Peer
    from ampcap.net.transport.wsmessages import client_handshake

    async def main() -> None:
        provider = Peer(Identity.generate(os.urandom), manifest=demo_manifest())
        async with provider.serve("amp://127.0.0.1:0") as served, trio.open_nursery() as nursery:
            front = HttpFront(served.daemon, config=HttpConfig(ws_ping_interval_s=0.3, ws_pong_timeout_s=0.3))
            port = (await nursery.start(front.serve, "127.0.0.1", 0))[0].socket.getsockname()[1]
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            ws = await client_handshake(stream, "x", token=None, max_size=1 << 20, timeout_s=5)
            ident = Identity.generate(os.urandom)
            _, hello = seal(ident, typ=MessageType.HELLO, to="did:web:unknown.invalid",
                            body={"versions": ["1.0"]}, now_ms=_now(), entropy=os.urandom, ttl=60_000)
            await stream.send_all(ws.send(Message(data=hello)))
            seen: list[Any] = []
            with trio.fail_after(5):
                while not any(isinstance(e, CloseConnection) for e in seen):
                    data = await stream.receive_some(65536)  # read, but never answer the Ping
                    ws.receive_data(data or None)
                    seen += list(ws.events())
                    if not data:
                        break
            assert any(isinstance(e, Ping) for e in seen)
            assert any(isinstance(e, CloseConnection) for e in seen)
            await stream.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)
