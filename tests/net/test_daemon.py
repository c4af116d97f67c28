"""The daemon in-process, over ``trio.testing.memory_stream_pair``.

RFC 004 Appendix A scenarios (shared with the loopback-TCP integration
tests), policy (A.9, 3005), in-flight limits (5004), isolation of a stalled
peer, and one terminal reply per invoke.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import (  # noqa: E402
    ECHO,
    ERROR,
    INVOKE,
    RESULT,
    client_connection,
    demo_catalog,
    demo_daemon,
    memory_peer,
    new_identity,
)
from amp_scenarios import SCENARIOS, error_code  # noqa: E402

from ampcap.net.daemon.core import Daemon, DaemonConfig  # noqa: E402
from ampcap.peer.events import ConnectionTerminated, MessageReceived  # noqa: E402
from ampcap.peer.outbound import Outbound  # noqa: E402
from ampcap.peer.policy import parse_policy  # noqa: E402
from ampcap.wire.cbor import loads  # noqa: E402
from ampcap.wire.receive import Inbound  # noqa: E402
from ampcap.wire.registry import MessageType, error_info  # noqa: E402


@pytest.mark.trio
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_in_process(name: str) -> None:
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        await SCENARIOS[name](peer)


@pytest.mark.trio
async def test_a_query_with_a_delegation_hint_is_checked_in_the_executors_order() -> None:
    # Policy before delegation (R10, then R9) through the daemon as in the
    # executor: a denied caller gets 3001, an allowed one 3004.
    friend = new_identity()
    policy = parse_policy({"default": "deny", "allow": [friend.did]})
    async with demo_daemon(policy=policy) as daemon:
        for who, code in ((None, 3001), (friend, 3004)):
            async with memory_peer(daemon, who) as peer:
                env = peer.send(int(MessageType.CAP_QUERY), {"filter": {"capability": ECHO}},
                                ext={"delegation_chain": ["did:example:boss"]})
                await peer.wait_for(lambda: peer.replies(env.id))
                (reply,) = peer.replies(env.id)
                assert reply.envelope.typ == ERROR and error_code(reply) == code


@pytest.mark.trio
async def test_a9_denied_caller_learns_nothing() -> None:
    friend = new_identity()
    policy = parse_policy({"capability": [{"match": "org.ampcap.demo.*", "allow": [friend.did]}]})
    async with demo_daemon(policy=policy) as daemon, memory_peer(daemon) as stranger:
        bodies = []
        for body in ({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}},  # exists
                     {"id": f"{ECHO}:7.0.0", "params": {"message": "x"}},  # version does not
                     {"id": "org.ampcap.demo.nope:1.0.0", "params": {}}):  # name does not
            reply = await stranger.invoke(body)
            assert reply.envelope.typ == ERROR and error_code(reply) == 3001
            bodies.append(reply.body)
        assert bodies[0] == bodies[1] == bodies[2]
        async with memory_peer(daemon, friend) as allowed:
            ok = await allowed.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}})
            assert ok.body["status"] == "success"
            missing = await allowed.invoke({"id": "org.ampcap.demo.nope:1.0.0", "params": {}})
            assert error_code(missing) == 4002


@pytest.mark.trio
async def test_a_message_addressed_to_another_agent_is_refused_not_run() -> None:
    # Alice's invoke for Carol, replayed to this daemon by whoever saw it,
    # must not run here as Alice: ``to`` is signed for exactly this.
    async with demo_daemon() as daemon, memory_peer(daemon) as alice:
        body = {"id": f"{ECHO}:1.0.0", "params": {"message": "for carol"}}
        for to in (new_identity().did, "did:web:carol.example"):
            env = alice.send(INVOKE, body, to=to)
            reply = await alice.terminal(env.id)
            assert reply.envelope.typ == ERROR and error_code(reply) == 3001
            assert reply.body["message"] == "message is not addressed to this agent"
        assert daemon.jobs.stats["invokes"] == 0
        ok = await alice.request(INVOKE, body)  # addressed to the daemon: runs
        assert ok.envelope.typ == RESULT and ok.body["result"]["message"] == "for carol"


@pytest.mark.trio
async def test_a_half_closed_peer_still_gets_every_reply_then_the_connection_closes(
        caplog: pytest.LogCaptureFixture) -> None:
    # A client sends its invokes (and GOAWAY), then shuts down its sending
    # side of the TCP connection and reads on: each invoke still gets its
    # one terminal reply (R5), and then the daemon closes.
    caplog.set_level(logging.INFO, logger="ampcap.daemon")
    async with demo_daemon() as daemon:
        [listener] = await daemon.listen("127.0.0.1", 0)
        stream = await trio.open_tcp_stream(*listener.socket.getsockname()[:2])
        client = client_connection(new_identity())
        client.start(0)
        received: list[Any] = []

        async def pump(until: Any) -> None:
            while not until():
                if out := client.data_to_send():
                    await stream.send_all(out)
                data = await stream.receive_some(65536)
                if not data:
                    client.receive_eof()
                else:
                    client.receive_data(data, time.time_ns() // 1_000_000)
                while (event := client.next_event()) is not None:
                    received.append(event)

        with trio.fail_after(10):
            await pump(lambda: client.peer_did is not None)
            now = time.time_ns() // 1_000_000
            ids = [client.send(Outbound(typ=INVOKE, body={"id": "org.ampcap.demo.sleep:1.0.0",
                                                          "params": {"ms": 300}}), now).id for _ in range(5)]
            client.start_drain(now, 0, "done sending")
            await stream.send_all(client.data_to_send())
            await stream.send_eof()
            await pump(lambda: any(isinstance(e, ConnectionTerminated) for e in received))
        results = [e.inbound for e in received if isinstance(e, MessageReceived)
                   and e.inbound.envelope.typ == RESULT]
        assert sorted(r.envelope.reply_to for r in results) == sorted(ids)
        assert all(r.body["status"] == "success" for r in results)
        assert "finished sending; invokes still to answer: yes" in caplog.text
        assert "every invoke was answered" in caplog.text


@pytest.mark.trio
async def test_types_the_daemon_does_not_implement_are_answered_1005() -> None:
    # RFC 001 §1.5: not silence, which would leave a REQUEST waiting forever.
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        for typ, body in ((0x10, {"text": "hi"}), (0x11, {"method": "x", "params": {}}),
                          (0x06, {"message": "hello"}), (0x61, {"dids": [peer.identity.did]})):
            env = peer.send(typ, body)
            await peer.wait_for(lambda: peer.replies(env.id))
            [reply] = peer.replies(env.id)
            assert reply.envelope.typ == ERROR and error_code(reply) == 1005, hex(typ)
            assert reply.body["message"].endswith("is not supported by this agent")
        pong = peer.send(0x02, None)  # an unasked-for PONG is not answered
        ping = peer.send(0x01, None)
        await peer.wait_for(lambda: peer.replies(ping.id))
        assert peer.replies(pong.id) == []


@pytest.mark.trio
async def test_messages_up_to_the_offered_maximum_are_accepted() -> None:
    # The handshake offers 16 MiB; the CBOR decoder must not stop at 1 MiB.
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        text = "x" * 1_200_000
        reply = await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": text}})
        assert reply.envelope.typ == RESULT and reply.body["result"]["message"] == text


@pytest.mark.trio
async def test_rate_limit_3005() -> None:
    policy = parse_policy({"rate_limit": {"rate": 0.001, "burst": 2}})
    async with demo_daemon(policy=policy) as daemon, memory_peer(daemon) as peer:
        codes = []
        for _ in range(3):
            reply = await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}})
            codes.append(None if reply.envelope.typ == RESULT else error_code(reply))
        assert codes == [None, None, 3005]


@pytest.mark.trio
async def test_in_flight_limit_5004_per_connection() -> None:
    config = DaemonConfig(max_in_flight_per_connection=2, max_in_flight=100)
    async with demo_daemon(config=config) as daemon, memory_peer(daemon) as peer:
        ids = [peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 300}}).id for _ in range(3)]
        replies = [await peer.terminal(i) for i in ids]
        assert [r.envelope.typ for r in replies] == [RESULT, RESULT, ERROR]
        assert error_code(replies[2]) == 5004
        # Another connection is not affected by this one's cap.
        async with memory_peer(daemon) as other:
            ok = await other.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "x"}})
            assert ok.envelope.typ == RESULT


@pytest.mark.trio
async def test_stalled_peer_does_not_stall_others() -> None:
    async with demo_daemon() as daemon:
        # A peer that connects and never says anything (not even HANDSHAKE)...
        silent_client, silent_server = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.serve_stream, silent_server)
            # ...and one that sends a lot and then stops reading.
            async with memory_peer(daemon) as greedy, memory_peer(daemon) as normal:
                for _ in range(50):
                    greedy.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "x" * 1000}})
                with trio.fail_after(5):
                    reply = await normal.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "y"}})
                assert reply.body["result"]["message"] == "y"
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_amp_ping_is_answered_with_pong() -> None:
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        env = peer.send(int(MessageType.PING), None)
        await peer.wait_for(lambda: peer.replies(env.id, int(MessageType.PONG)))


@pytest.mark.trio
async def test_drain_ends_running_invokes_with_one_5002() -> None:
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        ids = [peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 10_000}}).id
               for _ in range(5)]
        await peer.wait_for(lambda: daemon.executor.running == 5)
        await daemon.drain(0.2)
        for i in ids:
            terminals = peer.terminals(i)
            assert len(terminals) == 1 and error_code(terminals[0]) == 5002
        assert daemon.executor.running == 0


@pytest.mark.trio
async def test_body_with_a_map_inside_a_tag_as_key_gets_an_amp_error() -> None:
    # Found by fuzzing: re-encoding such a body for the signature check raised
    # RuntimeError out of the receive pipeline and took the daemon down with it.
    # {0: null, "params": {}, 21({0: 0, 7: 16}): 0}
    body = bytes.fromhex("a3" "00f6" "66706172616d73a0" "d5a2" "0000" "0710" "00")
    async with demo_daemon() as daemon:
        async with memory_peer(daemon) as peer:
            env = peer.driver.send_nowait(Outbound(typ=INVOKE, body=loads(body), body_cbor=body))
            reply = await peer.terminal(env.id)
            # The signature verified (the re-encoding is exact); the body names
            # no capability, which ruling R6 answers with 4001.
            assert reply.envelope.typ == ERROR and error_code(reply) == 4001
        async with memory_peer(daemon) as other:
            ok = await other.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "still here"}})
            assert ok.body["result"]["message"] == "still here"


@pytest.mark.trio
async def test_an_internal_error_costs_one_connection_not_the_daemon(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    async with demo_daemon() as daemon:
        handle = daemon.executor.handle

        def buggy(inbound: Inbound, conn: object, now_ms: int) -> list[object]:
            if inbound.body.get("params") == {"message": "boom"}:
                raise RuntimeError("simulated bug")
            return handle(inbound, conn, now_ms)

        monkeypatch.setattr(daemon.executor, "handle", buggy)
        async with memory_peer(daemon) as victim, memory_peer(daemon) as bystander:
            victim.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "boom"}})
            with trio.fail_after(5):
                while victim.terminated is None:
                    await trio.sleep(0.01)
            ok = await bystander.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "fine"}})
            assert ok.body["result"]["message"] == "fine"
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert any("internal error" in m and "RuntimeError: simulated bug" in m for m in errors), errors


@pytest.mark.trio
async def test_a_peers_text_is_one_escaped_log_line_under_any_handler(caplog: pytest.LogCaptureFixture) -> None:
    # No CLI formatter here: the daemon escapes what a peer wrote itself.
    caplog.set_level(logging.INFO, logger="ampcap")
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        peer.driver.start_drain(0, "bye\x1b[2J\nforged line")
        with trio.fail_after(5):
            while not any("GOAWAY" in r.getMessage() for r in caplog.records):
                await trio.sleep(0.01)
    # (The close that follows names the GOAWAY too: "the peer closed the connection (GOAWAY)".)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("GOAWAY from")]
    assert line.endswith("message=bye\\x1b[2J\\nforged line")


@pytest.mark.trio
async def test_a_rejected_invoke_is_logged_with_its_code(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap")
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        reply = await peer.invoke({"id": f"{ECHO}:9.0.0", "params": {"message": "x"}})
        assert error_code(reply) == 4003
        reply = await peer.invoke({"id": "org.ampcap.demo.no\x1bpe:1.0.0", "params": {}})
    lines = [r.getMessage() for r in caplog.records if "invoke rejected" in r.getMessage()]
    assert len(lines) == 2 and "code=4003 VERSION_MISMATCH" in lines[0]
    assert "\x1b" not in lines[1] and "\\x1b" in lines[1]  # the peer's text, escaped


@pytest.mark.trio
async def test_the_close_log_line_names_the_code_or_says_there_was_none(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap")

    def closed_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("connection closed")]

    async with demo_daemon() as daemon:
        async with memory_peer(daemon):
            pass
        with trio.fail_after(5):
            while not closed_lines():
                await trio.sleep(0.01)
        (orderly,) = closed_lines()
        assert " code=- " in orderly and "peer=did:key:" in orderly

        # Bytes that are no frame, before any HELLO: no peer yet, and a code with its name.
        client_end, server_end = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.serve_stream, server_end)
            await client_end.send_all(b"\xff" * 64)
            with trio.fail_after(5):
                while len(closed_lines()) < 2:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    failed = closed_lines()[1]
    assert failed.startswith("connection closed peer=- code=1"), failed
    code = int(failed.split("code=")[1].split()[0])
    assert f"code={code} {error_info(code).name} " in failed


@pytest.mark.trio
async def test_drain_logs_what_it_waits_for_and_what_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap")
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        env = peer.send(INVOKE, {"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 5000}})
        with trio.fail_after(5):
            while not daemon.executor.running:
                await trio.sleep(0.01)
        await daemon.drain(0.05)
        reply = await peer.terminal(env.id)
        assert error_code(reply) == 5002
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "drain" in r.getMessage()]
    assert lines[:2] == [("INFO", "draining: invokes_running=1 connections=1 timeout=0.05s"),
                         ("WARNING", "drain timeout after 0.05s: invokes_running=1 end with 5002 UNAVAILABLE")]


@pytest.mark.trio
async def test_peers_that_never_read_share_one_send_budget() -> None:
    """Each connection may queue up to max_send_buffer (1 MiB here) for its
    peer; all of them together no more than max_send_buffer_total (64 KiB
    here). PINGs cost the daemon nothing to answer, so flooders that never
    read the PONGs would otherwise pin 1 MiB each."""
    import socket

    from ampcap.interop.probe import Probe, ProbeSettings
    from ampcap.net.transport.stream import RECEIVE_SIZE
    from ampcap.net.transport.url import parse_url
    from ampcap.wire.frames import FrameType, encode_frame

    total = 64 * 1024
    config = DaemonConfig(max_send_buffer_total=total)
    assert config.connection.max_send_buffer == 1 << 20
    async with demo_daemon(config=config) as daemon:
        (listener, *_) = await daemon.listen("127.0.0.1", 0)
        url = parse_url(f"amp://127.0.0.1:{listener.socket.getsockname()[1]}")
        flooders = []
        for _ in range(3):
            probe = await Probe.open(url, ProbeSettings(timeout_s=5))
            await probe.open_session()
            probe.stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # type: ignore[attr-defined]
            flooders.append(probe)
        pings = encode_frame(FrameType.PING, b"12345678") * 4096
        peak = 0

        async def flood(probe: Probe) -> None:
            while True:
                await probe.stream.send_all(pings)  # blocks once the daemon stops reading

        async with trio.open_nursery() as nursery:
            for probe in flooders:
                nursery.start_soon(flood, probe)
            with trio.move_on_after(20):
                while not daemon.send_budget.exceeded:
                    peak = max(peak, daemon.send_budget.used)
                    await trio.sleep(0.005)
            assert daemon.send_budget.exceeded  # the flood got past the kernel's buffers
            # Now every flooder's reader waits; a well-behaved peer still gets answers.
            async with memory_peer(daemon) as peer:
                ok = await peer.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "still here"}})
                assert ok.body["result"]["message"] == "still here"
            for _ in range(50):
                peak = max(peak, daemon.send_budget.used)
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        # Over the limit by at most what each flooder's last read produced.
        assert peak <= total + len(flooders) * 2 * RECEIVE_SIZE, peak
        backlogs = [d.backlog for d in daemon.listener.drivers]
        assert max(backlogs) < 1 << 20  # no connection came near its own 1 MiB
        for probe in flooders:
            await probe.aclose()
        with trio.fail_after(10):
            while daemon.listener.drivers:
                await trio.sleep(0.01)
        assert daemon.send_budget.used == 0  # what closed connections held is returned


@pytest.mark.trio
async def test_large_frames_take_turns_in_the_shared_receive_budget(caplog: pytest.LogCaptureFixture) -> None:
    """Before reading on into a frame over 16 KiB a connection reserves its
    declared size in the daemon's receive budget (150 KB here); one that does
    not fit waits, unread, until room is given back, and small frames on
    other connections are not held up meanwhile. Without the budget, peers
    that each send most of a 16 MiB frame held 16 MiB apiece."""
    import os

    from ampcap.wire.envelope import new_message_id

    config = DaemonConfig(max_receive_buffer_total=150_000)
    caplog.set_level(logging.INFO, logger="ampcap")

    def unsent_invoke(peer: Any, text: str) -> tuple[bytes, bytes]:
        # Sealed and framed by the peer's Connection, taken before its driver
        # writes them, so the test can send them a piece at a time.
        now = time.time_ns() // 1_000_000
        mid = new_message_id(now, os.urandom)
        env = peer.driver.conn.send(Outbound(typ=INVOKE, body={"id": f"{ECHO}:1.0.0", "params": {"message": text}},
                                             msg_id=mid, ts_ms=now, ttl_ms=600_000), now)
        return env.id, peer.driver.conn.data_to_send()

    async def until(predicate: Any) -> None:
        with trio.fail_after(5):
            while not predicate():
                await trio.sleep(0.005)

    async with demo_daemon(config=config) as daemon, memory_peer(daemon) as first, memory_peer(daemon) as second:
        budget = daemon.receive_budget
        (id1, wire1), (id2, wire2) = unsent_invoke(first, "a" * 100_000), unsent_invoke(second, "b" * 100_000)
        await first.driver.stream.send_all(wire1[:-10])
        await until(lambda: budget.used >= 100_000)
        await second.driver.stream.send_all(wire2[:-10])
        await until(lambda: budget.waiting == 1)
        assert budget.used < 110_000  # only the first frame is held
        (line,) = [r.getMessage() for r in caplog.records if "receive budget full" in r.getMessage()]
        assert f"waits, unread, until {budget.used + len(wire2) - 5 - 150_000} bytes are free" in line

        async with memory_peer(daemon) as third:  # small frames still flow
            ok = await third.invoke({"id": f"{ECHO}:1.0.0", "params": {"message": "small"}})
            assert ok.body["result"]["message"] == "small"
        assert budget.waiting == 1 and not second.inbox

        await first.driver.stream.send_all(wire1[-10:])
        assert (await first.terminal(id1)).body["result"]["message"] == "a" * 100_000
        await until(lambda: budget.waiting == 0)  # the second frame got its turn
        await second.driver.stream.send_all(wire2[-10:])
        assert (await second.terminal(id2)).body["result"]["message"] == "b" * 100_000
        await until(lambda: budget.used == 0)


@pytest.mark.trio
async def test_a_connection_that_closes_mid_frame_gives_its_reservation_back() -> None:
    config = DaemonConfig(max_receive_buffer_total=150_000)
    async with demo_daemon(config=config) as daemon:
        async with memory_peer(daemon) as peer:
            header = (100_001).to_bytes(4, "big") + b"\x01"
            await peer.driver.stream.send_all(header + b"\0" * 20_000)
            with trio.fail_after(5):
                while daemon.receive_budget.used < 100_000:
                    await trio.sleep(0.005)
        with trio.fail_after(5):
            while daemon.receive_budget.used:
                await trio.sleep(0.005)


@pytest.mark.trio
async def test_a_daemon_on_trio_clock_runs_its_deadlines_in_virtual_time(
        autojump_clock: trio.testing.MockClock) -> None:
    """Daemon(clock=trio_clock(...)): envelope time and timers follow trio's
    clock, so a MockClock runs a 2 s invoke timeout at once."""
    import time

    from ampcap.net.transport.clock import trio_clock, wall_clock_ms

    catalog, params = demo_catalog()
    # Origin = real now, so the peer's real-time envelopes are fresh for the daemon.
    daemon = Daemon(new_identity(), catalog, params=params, clock=trio_clock(origin_ms=wall_clock_ms()))
    real_start = time.monotonic()
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        async with memory_peer(daemon) as peer:
            started = trio.current_time()
            reply = await peer.invoke({"id": "org.ampcap.demo.sleep:1.0.0", "params": {"ms": 600_000},
                                       "timeout_ms": 2_000}, timeout=60)
            assert error_code(reply) == 5003
            assert 2.0 <= trio.current_time() - started < 2.5
            # Envelope time too: ten virtual seconds on, a message stamped
            # (in real time) with a 5 s ttl has expired for this daemon.
            await trio.sleep(10)
            stale = peer.send(INVOKE, {"id": f"{ECHO}:1.0.0", "params": {"message": "late"}}, ttl_ms=5_000)
            await peer.wait_for(lambda: peer.replies(stale.id))
            assert error_code(peer.replies(stale.id)[0]) == 1003
        await daemon.drain(1.0)
        nursery.cancel_scope.cancel()
    assert time.monotonic() - real_start < 2.0  # virtual seconds, not real ones


@pytest.mark.trio
async def test_joining_an_amps_relay_that_does_not_speak_tls_fails_at_once_and_says_why() -> None:
    # A relay answers nothing of its own, so without an explicit TLS
    # handshake the link would look registered and then quietly close.
    from ampcap.errors import AmpError

    async with demo_daemon() as daemon:
        [plain] = await daemon.listen("127.0.0.1", 0)
        port = plain.socket.getsockname()[1]
        with trio.fail_after(10), pytest.raises(AmpError) as info:
            await daemon.join_relay(f"amps://127.0.0.1:{port}", timeout_s=5)
        assert info.value.code == 5002 and "TLS failed" in info.value.message


@pytest.mark.trio
async def test_connecting_to_a_silent_port_names_the_missing_handshake_answer() -> None:
    from ampcap.errors import AmpError

    async with demo_daemon() as daemon:
        ours, silent = trio.testing.memory_stream_pair()
        with pytest.raises(AmpError) as info:
            await daemon.connect_stream(ours, timeout_s=0.2)
        # A timeout is 5003 whichever deadline ends it, ours or the handshake's.
        assert info.value.code == 5003
        assert info.value.message == "cannot open connection: no answer to our HANDSHAKE within 0.2 s"
        await silent.aclose()


@pytest.mark.trio
async def test_a_peers_huge_values_make_short_log_lines_and_short_errors(caplog: pytest.LogCaptureFixture) -> None:
    # A version of megabytes (a valid SemVer pre-release) was logged whole by
    # the executor's rejection line and the daemon's, and echoed in the
    # ERROR; rejections are not throttled, so a peer could fill the disk.
    caplog.set_level(logging.DEBUG, logger="ampcap")
    huge = "a" * 2_000_000
    async with demo_daemon() as daemon, memory_peer(daemon) as peer:
        bodies = [
            {"capability": ECHO, "version": "1.0.0-" + huge, "params": {"message": "x"}},  # 4003
            {"capability": ECHO, "negotiate": {"range": ">=1.0.0 <" + huge}, "params": {"message": "x"}},  # 4001
            {"capability": "org." + huge, "version": "1.0.0", "params": {}},  # 4002
            {"id": "org." + huge, "params": {}},  # 4001, no version (refused by the receive checks)
        ]
        codes = []
        for body in bodies:
            reply = await peer.invoke(body)
            assert reply.envelope.typ == ERROR
            codes.append(error_code(reply))
            assert len(reply.body["message"]) < 1_000, (error_code(reply), reply.body["message"][:300])
        query = await peer.request(int(MessageType.CAP_QUERY), {"filter": {"capability": "org." + huge}})
        assert query.envelope.typ == ERROR and len(query.body["message"]) < 1_000
        peer.driver.start_drain(0, "b" * 60_000)  # a GOAWAY message as long as a control frame allows
        with trio.fail_after(5):
            while not any("GOAWAY" in r.getMessage() for r in caplog.records):
                await trio.sleep(0.01)
    assert codes == [4003, 4001, 4002, 4001]
    lengths = sorted(len(r.getMessage()) for r in caplog.records)
    assert lengths[-1] < 2_000, [r.getMessage()[:200] for r in caplog.records if len(r.getMessage()) >= 2_000]
    rejected = [r.getMessage() for r in caplog.records if "invoke rejected" in r.getMessage()]
    assert len(rejected) == 3 and "code=4003 VERSION_MISMATCH: version 1.0.0-aaa" in rejected[0]
    assert "(2000006 chars) of org.ampcap.demo.echo is not served" in rejected[0]  # cut, and says so


@pytest.mark.trio
async def test_any_line_the_core_asks_to_log_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    # The safety net under the fields each Log action cuts itself: a line
    # that quotes a peer's value whole still cannot be megabytes long.
    from ampcap.peer.outbound import Log

    caplog.set_level(logging.INFO, logger="ampcap")
    async with demo_daemon() as daemon:
        daemon._apply([Log(logging.WARNING, "odd reply: " + "\x1b" * 3_000_000), Log(logging.INFO, "x" * 10, "t")])
    (line, short) = [r.getMessage() for r in caplog.records if "odd reply" in r.getMessage() or r.getMessage() == "x" * 10]
    assert line.startswith("odd reply: \\x1b") and line.endswith("(3000011 chars)") and len(line) < 12_000
    assert short == "x" * 10
