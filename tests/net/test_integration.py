"""End to end over real loopback TCP: ``ampcap serve --demo`` in a separate
process, clients in this one (raw connections and the Python API)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import ECHO, ERROR, INVOKE, ServeProcess, new_identity, raw_peer, serve_process  # noqa: E402
from amp_scenarios import SCENARIOS, error_code  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.net.api.peer import Negotiate, Peer, connect  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.envelope import seal  # noqa: E402
from ampcap.wire.frames import FrameDecoder, FrameType, encode_frame  # noqa: E402
from ampcap.wire.transport import HandshakeRequest, HandshakeResponse, TransportError  # noqa: E402


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(tmp_path_factory.mktemp("serve"), verbose=True) as proc:
        yield proc
        assert proc.terminate() == 0


@pytest.mark.trio
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_over_tcp(daemon: ServeProcess, name: str) -> None:
    async with raw_peer(daemon.url) as peer:
        await SCENARIOS[name](peer)


@pytest.mark.trio
async def test_duplicate_logged_as_one_execution(daemon: ServeProcess) -> None:
    async with raw_peer(daemon.url) as peer:
        body = {"id": f"{ECHO}:1.1.0", "params": {"message": "once"}}
        first = peer.send(INVOKE, body)
        peer.send(INVOKE, body, msg_id=first.id, ts_ms=first.ts)
        await peer.terminal(first.id)
        await trio.sleep(0.3)
    log = daemon.stderr()
    assert log.count(f"invoke received id={first.id.hex()}") == 1
    assert log.count(f"invoke completed id={first.id.hex()}") == 1


@pytest.mark.trio
async def test_python_api_against_cli_daemon(daemon: ServeProcess) -> None:
    progress: list[int | None] = []
    async with connect(daemon.url, identity=new_identity(), peer_did=daemon.did) as remote:
        assert remote.did == daemon.did
        assert await remote.invoke("org.ampcap.demo.math.add", version="1.0.0", params={"a": 2, "b": 3.5}) == {"sum": 5.5}
        # Integers past 64 bits travel as CBOR bignums and arrive as ints on both sides.
        assert await remote.invoke("org.ampcap.demo.math.add:1.0.0", params={"a": 2**70, "b": -(2**65)}) == {
            "sum": 2**70 - 2**65}
        out = await remote.invoke(ECHO, negotiate=Negotiate(preferred="2.1.0", acceptable=["2.0.0"]),
                                  params={"message": "hey"})
        assert out == {"message": "hey", "version": "2.0.0", "length": 3}
        slept = await remote.invoke("org.ampcap.demo.sleep:1.0.0", params={"ms": 250},
                                    on_progress=lambda pct, text: progress.append(pct))
        assert slept == {"slept_ms": 250} and progress and progress[-1] == 100
        page = await remote.query("echo", range=">=1.0.0 <2.0.0", limit=10)
        assert [d.id for d in page] == [f"{ECHO}:1.1.0", f"{ECHO}:1.0.0"]
        with pytest.raises(AmpError) as info:
            await remote.invoke(ECHO, version="1.5.0", params={"message": "x"})
        assert info.value.code == 4003
        with pytest.raises(AmpError) as info:
            await remote.invoke("org.ampcap.demo.sleep:1.0.0", params={"ms": 3000}, timeout=0.3)
        assert info.value.code == 5003


def test_the_cli_invokes_through_an_ossa_uri_alias(daemon: ServeProcess, tmp_path: Path) -> None:
    # 'ossa:demo/add@1.0' has a colon of its own: a name, to combine with --version.
    import json
    import os
    import subprocess

    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "ampcap.cli.main", "invoke", daemon.url, "ossa:demo/add@1.0",
                           "--version", "1.0.0", "--params", '{"a": 1, "b": 2}', "--json"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == {"sum": 3}


@pytest.mark.trio
async def test_wrong_peer_did_is_refused(daemon: ServeProcess) -> None:
    with pytest.raises(AmpError) as info:
        async with connect(daemon.url, identity=new_identity(), peer_did=new_identity().did):
            pass
    assert info.value.code == 3001


def test_a9_with_policy_file(tmp_path: Path) -> None:
    friend = new_identity()
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[[capability]]\nmatch = "org.ampcap.demo.*"\nallow = ["{friend.did}"]\n')

    async def probe(url: str) -> None:
        async with raw_peer(url) as stranger:
            denied = [await stranger.invoke(b) for b in (
                {"id": f"{ECHO}:1.0.0", "params": {"message": "x"}},
                {"id": f"{ECHO}:8.0.0", "params": {"message": "x"}},
                {"id": "org.ampcap.demo.absent:1.0.0", "params": {}})]
            assert all(d.envelope.typ == ERROR and error_code(d) == 3001 for d in denied)
            assert denied[0].body == denied[1].body == denied[2].body
        async with raw_peer(url, friend) as allowed:
            ok = await allowed.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}})
            assert ok.body["status"] == "success"

    with serve_process(tmp_path, "--policy", str(policy)) as proc:
        trio.run(probe, proc.url)
        assert proc.terminate() == 0


# ----------------------------------------------------- RFC 002 transport


async def _handshaken_socket(url: str) -> tuple[trio.SocketStream, FrameDecoder]:
    target = parse_url(url)
    stream = await trio.open_tcp_stream(target.host, target.port)
    ident = new_identity()
    await stream.send_all(encode_frame(FrameType.HANDSHAKE,
                                       HandshakeRequest(max_msg_size=1 << 20, did=ident.did).to_payload()))
    decoder = FrameDecoder(16 << 20)
    frames = []
    while not frames:
        frames = decoder.feed(await stream.receive_some(65536))
    assert frames[0].type is FrameType.HANDSHAKE
    assert HandshakeResponse.from_payload(frames[0].payload).accepted
    return stream, decoder


async def _frames_until_eof(stream: trio.SocketStream, decoder: FrameDecoder) -> list:
    frames = []
    with trio.fail_after(10):
        while data := await stream.receive_some(65536):
            frames += decoder.feed(data)
    return frames


@pytest.mark.trio
async def test_rfc002_a5_oversize_frame_gets_transport_error_then_close(daemon: ServeProcess) -> None:
    stream, decoder = await _handshaken_socket(daemon.url)
    size = (1 << 20) + 1  # payload of 1 MiB + 1 byte (effective max is 1 MiB)
    header = (size + 1).to_bytes(4, "big") + bytes([FrameType.AMP_MESSAGE])
    await stream.send_all(header + b"\0" * 4096)  # the header alone is enough to refuse
    frames = await _frames_until_eof(stream, decoder)
    errors = [f for f in frames if f.type is FrameType.ERROR]
    assert errors, frames
    assert TransportError.from_payload(errors[0].payload).code == 1001
    await stream.aclose()


@pytest.mark.trio
async def test_rfc002_a7_message_before_hello_is_refused(daemon: ServeProcess) -> None:
    stream, decoder = await _handshaken_socket(daemon.url)
    ident = new_identity()
    _, wire = seal(ident, typ=0x10, to=daemon.did, body={"text": "hi"}, now_ms=trio_now_ms(), entropy=os.urandom)
    await stream.send_all(encode_frame(FrameType.AMP_MESSAGE, wire))
    frames = await _frames_until_eof(stream, decoder)
    errors = [TransportError.from_payload(f.payload) for f in frames if f.type is FrameType.ERROR]
    assert [e.code for e in errors] == [1004]
    await stream.aclose()


@pytest.mark.trio
async def test_a_peers_text_stays_one_escaped_log_line(daemon: ServeProcess) -> None:
    # The GOAWAY reason is the peer's text: an escape sequence, a C1 CSI and a
    # newline that would forge a log line of its own.
    reason = "bye\x1b[2J\x9b31m\nERROR forged line"
    async with raw_peer(daemon.url) as peer:
        peer.driver.start_drain(0, reason)
        await trio.sleep(0.3)
    with trio.fail_after(10):
        while "bye\\x1b[2J" not in daemon.stderr():
            await trio.sleep(0.05)
    log = daemon.stderr()
    assert "\x1b" not in log and "\x9b" not in log
    assert not any(line.startswith("ERROR forged") for line in log.splitlines())
    assert "message=bye\\x1b[2J\\x9b31m\\nERROR forged line" in log


def trio_now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


@pytest.mark.trio
async def test_peer_serves_and_is_invoked_back(tmp_path: Path) -> None:
    """Both directions on one connection: the daemon side calls the client's capability."""
    client = Peer(new_identity())

    @client.capability("org.example.whoami", version="1.0.0")
    def whoami() -> dict:
        return {"me": client.did}

    server = Peer(new_identity())
    async with server.serve("amp://127.0.0.1:0") as srv, client.connect(srv.url) as remote:
        assert remote.did == server.did
        (link,) = [lk for lk in srv.daemon.links if lk.peer_did == client.did]
        answer = await srv.daemon.calls.invoke(link, "org.example.whoami:1.0.0", {}, timeout_ms=5000)
        assert answer == {"me": client.did}


def test_ack_on_receipt_comes_before_the_result(tmp_path: Path) -> None:
    from ampcap.wire.registry import MessageType

    async def run(url: str) -> list[int]:
        async with raw_peer(url) as peer:
            sent = peer.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "a"}})
            await peer.terminal(sent.id)
            return [m.envelope.typ for m in peer.replies(sent.id)]

    with serve_process(tmp_path, "--ack") as proc:
        typs = trio.run(run, proc.url)
    assert typs == [int(MessageType.ACK), int(MessageType.CAP_RESULT)]


@pytest.mark.trio
async def test_serve_dials_a_peer_that_then_invokes_it_over_that_connection(tmp_path: Path) -> None:
    """Both directions from the command line: `ampcap serve --connect URL`
    dials a listening agent, which then calls the daemon's capabilities over
    the connection the daemon opened."""
    listener = Peer(new_identity())
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    async with listener.serve("amp://127.0.0.1:0") as server:
        # Started without blocking the event loop: the listener must answer
        # the daemon's HANDSHAKE and HELLO while we wait for its URL line.
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ampcap", "serve", "--demo", "--listen", "127.0.0.1:0", "--connect", server.url],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        try:
            line = b""
            with trio.fail_after(20):
                while not line.endswith(b"\n"):
                    line += await proc.stdout.receive_some(1024)
            did = line.split()[1].decode()
            with trio.fail_after(10):
                while not any(r.did == did for r in server.remotes()):
                    await trio.sleep(0.05)
            remote = server.remote(did)
            assert await remote.invoke("org.ampcap.demo.math.add:1.0.0", params={"a": 20, "b": 22}) == {"sum": 42}
            with pytest.raises(KeyError):
                server.remote("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK")
        finally:
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await proc.wait() == 0
