"""The Python API (``ampcap.net.api.peer``): declaring, serving, calling.

Also RFC 004 A.12 / A.13 from the caller's side: a test provider that
answers with a wrong ``reply_to`` gets ERROR 4001 and the call is not
resolved by that answer.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import DECLARE, ERROR, RESULT, new_identity  # noqa: E402

from ampcap import AmpError  # noqa: E402
from ampcap.caps.catalog import Catalog  # noqa: E402
from ampcap.caps.demo import demo_manifest  # noqa: E402
from ampcap.net.daemon.core import Daemon  # noqa: E402
from ampcap.net.api.peer import InvocationContext, Negotiate, Peer, Remote, capability, connect, schema_from_signature  # noqa: E402
from ampcap.net.transport.stream import ConnectionDriver  # noqa: E402
from ampcap.peer.connection import Connection, Role  # noqa: E402
from ampcap.peer.events import Event, MessageReceived  # noqa: E402
from ampcap.peer.outbound import Outbound  # noqa: E402
from ampcap.wire.identity import DidKeyResolver  # noqa: E402
from ampcap.wire.receive import Inbound, ReceivePipeline  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402


def test_schema_from_type_hints() -> None:
    def greet(name: str, times: int = 1, loud: bool = False, ctx: Any = None) -> dict:
        return {}

    schema = schema_from_signature(greet)
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    assert schema["properties"]["name"] == {"type": "string"}
    assert schema["properties"]["times"]["type"] == "integer"
    assert "ctx" not in schema["properties"]
    assert schema["additionalProperties"] is False


def make_peer() -> Peer:
    peer = Peer(new_identity())

    @peer.capability("org.example.greet", version="1.0.0")
    async def greet(name: str, excited: bool = False) -> dict:
        """Greets somebody."""
        return {"greeting": f"Hello, {name}{'!' if excited else '.'}"}

    @peer.capability("org.example.greet", version="1.1.0", schema={"type": "object"})
    def greet_v11(**params: Any) -> dict:
        return {"greeting": "v1.1", "params": params}

    @peer.capability("org.example.slow", version="1.0.0")
    async def slow(steps: int, ctx: Any) -> dict:
        for i in range(steps):
            await ctx.sleep(10)
            await ctx.progress(100 * (i + 1) / steps, f"step {i + 1}")
        return {"steps": steps}

    @peer.capability("org.example.broken", version="1.0.0")
    def broken() -> None:
        raise ValueError("internal detail that must not leak")

    @peer.capability("org.example.picky", version="1.0.0")
    def picky(n: int) -> int:
        if n < 0:
            raise AmpError(4001, "n must not be negative")
        return n * 2

    return peer


@pytest.mark.trio
async def test_serve_and_invoke_over_loopback() -> None:
    peer = make_peer()
    async with peer.serve("amp://127.0.0.1:0") as server:
        assert server.url.startswith("amp://127.0.0.1:") and server.did == peer.did
        async with connect(server.url, identity=new_identity()) as remote:
            assert await remote.invoke("org.example.greet", version="1.0.0", params={"name": "Ada"}) == \
                {"greeting": "Hello, Ada."}
            assert (await remote.invoke("org.example.greet:1.1.0", params={"x": 1}))["params"] == {"x": 1}
            newest = await remote.invoke("org.example.greet", range=">=1.0.0 <2.0.0", params={})
            assert newest["greeting"] == "v1.1"
            chosen = await remote.invoke("org.example.greet", negotiate=Negotiate(preferred="1.0.0"),
                                         params={"name": "Bo", "excited": True})
            assert chosen == {"greeting": "Hello, Bo!"}

            seen: list[tuple[int | None, str | None]] = []

            async def on_progress(pct: int | None, text: str | None) -> None:
                seen.append((pct, text))

            assert await remote.invoke("org.example.slow:1.0.0", params={"steps": 4},
                                       on_progress=on_progress) == {"steps": 4}
            assert [p for p, _ in seen] == [25, 50, 75, 100]

            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.broken:1.0.0")
            assert info.value.code == 5001 and "internal detail" not in info.value.message
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.picky:1.0.0", params={"n": -1})
            assert info.value.code == 4001 and "negative" in info.value.message
            assert await remote.invoke("org.example.picky:1.0.0", params={"n": 21}) == 42
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.picky:1.0.0", params={"n": "x"})
            assert info.value.code == 4004
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.greet", version="1.0.0", params={"name": "A", "typo": 1})
            assert info.value.code == 4004

            # A malformed version or range is the caller's ValueError (docs/python-api.md),
            # not the peer's 4001 (issue 38 item 12).
            for bad in ({"range": "^1.0.0"}, {"range": "1.x"}, {"version": "1.0"}):
                with pytest.raises(ValueError, match="range|version"):
                    await remote.invoke("org.example.greet", params={}, **bad)
            with pytest.raises(ValueError, match="range='~1.0.0'"):
                await remote.query("org.example.greet", range="~1.0.0")

            page = await remote.query("org.example.greet")
            assert [d.id for d in page] == ["org.example.greet:1.1.0", "org.example.greet:1.0.0"]
            assert page.capabilities[1].notes == "Greets somebody."


@dataclasses.dataclass
class Box:
    w: int
    h: int = 1


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.trio
async def test_parameters_arrive_as_the_types_their_hints_declare() -> None:
    # Not their JSON form: a dataclass as the dataclass, an Enum as its member,
    # a tuple as a tuple (whose schema must hold under the draft-07 label).
    peer = Peer(new_identity())
    seen: dict[str, Any] = {}

    @peer.capability("org.example.typed", version="1.0.0")
    def typed(box: Box, colour: Colour, pair: tuple[int, str], scale: float = 1.0) -> str:
        seen.update(box=box, colour=colour, pair=pair, scale=scale)
        return f"{box.w * box.h * scale:g} {colour.value} {pair[1]}"

    async with peer.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        out = await remote.invoke("org.example.typed:1.0.0",
                                  params={"box": {"w": 2, "h": 3}, "colour": "blue", "pair": [1, "x"], "scale": 2})
        assert out == "12 blue x"
        assert seen == {"box": Box(2, 3), "colour": Colour.BLUE, "pair": (1, "x"), "scale": 2.0}
        for bad in ({"box": {"w": 2}, "colour": "green", "pair": [1, "x"]},
                    {"box": {"w": 2}, "colour": "red", "pair": [1, "x", 3]}):
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.typed:1.0.0", params=bad)
            assert info.value.code == 4004


def test_invoke_argument_errors_are_caught_before_sending() -> None:
    from ampcap.net.api.remote import _target

    with pytest.raises(ValueError):
        _target("org.x", "1.0.0", ">=1.0.0", None)
    with pytest.raises(ValueError):
        _target("org.x", None, None, None)
    assert _target("org.x:1.0.0", None, None, None) == "org.x:1.0.0"


@pytest.mark.trio
async def test_module_level_capability_marker() -> None:
    @capability("org.example.double", version="2.0.0")
    def double(x: float) -> float:
        return 2 * x

    peer = Peer(new_identity())
    peer.include(double)
    async with peer.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        assert await remote.invoke("org.example.double:2.0.0", params={"x": 1.5}) == 3.0


@pytest.mark.trio
async def test_results_go_out_in_the_forms_params_arrive_in(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ampcap")
    peer = Peer(new_identity())

    class Colour(enum.Enum):
        RED = "red"

    @dataclasses.dataclass
    class Box:
        w: int
        colour: Colour

    @peer.capability("org.example.box")
    async def box() -> Box:
        return Box(2, Colour.RED)

    @peer.capability("org.example.tags")
    def tags() -> set[str]:
        return {"a"}

    @peer.capability("org.example.opaque")
    async def opaque() -> object:
        return object()

    async with peer.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        assert await remote.invoke("org.example.box:1.0.0") == {"w": 2, "colour": "red"}
        assert await remote.invoke("org.example.tags:1.0.0") == ["a"]
        with pytest.raises(AmpError) as info:
            await remote.invoke("org.example.opaque:1.0.0")
        assert info.value.code == 5001
    lines = [r.getMessage() for r in caplog.records]
    assert any("org.example.opaque:1.0.0 returned a result that cannot be sent" in m and "object" in m
               for m in lines), lines
    assert any("cap=org.example.opaque:1.0.0" in m and "5001" in m for m in lines if "completed" in m), lines


@pytest.mark.trio
async def test_the_context_parameter_is_found_by_its_hint_and_plain_functions_report_progress() -> None:
    peer = Peer(new_identity())

    @peer.capability("org.example.named")
    async def named(n: int, context: InvocationContext) -> str:  # any name, given the hint
        await context.progress(50, "half")
        return f"{n} {context.capability_id}"

    @peer.capability("org.example.plain")
    def plain(n: int, ctx: InvocationContext) -> int:  # a worker thread: plain calls
        ctx.progress(25, "a quarter")
        ctx.sleep(1)
        return n + 1

    assert set(schema_from_signature(named)["properties"]) == {"n"}
    async with peer.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        seen: list[tuple[int | None, str | None]] = []
        out = await remote.invoke("org.example.named:1.0.0", params={"n": 1},
                                  on_progress=lambda pct, text: seen.append((pct, text)))
        assert out == "1 org.example.named:1.0.0"
        assert await remote.invoke("org.example.plain:1.0.0", params={"n": 1},
                                   on_progress=lambda pct, text: seen.append((pct, text))) == 2
        assert seen == [(50, "half"), (25, "a quarter")]


@pytest.mark.trio
async def test_mistakes_in_a_call_are_caught_before_sending_and_a_closed_link_says_so() -> None:
    peer = make_peer()
    async with peer.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            with pytest.raises(ValueError, match="is a full id"):
                await remote.invoke("org.example.greet:1.0.0", version="1.0.0")
            with pytest.raises(ValueError, match="order must be one of"):
                await remote.query("org.example.greet", order="sideways")  # type: ignore[arg-type]
            assert len(await remote.query("org.example.greet", order="oldest-first")) >= 1
            await remote.aclose()
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.greet:1.0.0", params={"name": "x"})
            assert info.value.code == 5002 and info.value.message == "cannot send: the connection is closed"


@pytest.mark.trio
async def test_async_progress_callbacks_run_one_at_a_time_in_order() -> None:
    peer = Peer(new_identity())

    @peer.capability("org.example.burst")
    async def burst(ctx: InvocationContext) -> str:
        for i in range(10):
            await ctx.progress(i * 10, f"step {i}")  # back to back, no pause between reports
        return "ok"

    async with peer.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        for _ in range(20):
            seen: list[int | None] = []
            running = 0

            async def on_progress(pct: int | None, text: str | None) -> None:
                nonlocal running
                running += 1
                assert running == 1, "two progress callbacks ran at once"
                await trio.sleep(0)  # a checkpoint: the next report could start here if not held back
                seen.append(pct)
                running -= 1

            assert await remote.invoke("org.example.burst:1.0.0", on_progress=on_progress) == "ok"
            assert seen == [i * 10 for i in range(10)]


@pytest.mark.trio
async def test_cancelling_a_serve_block_with_an_invoke_running_ends_it_at_once() -> None:
    # The handler dies with the cancelled task group; its invoke must still
    # end (5002 to the caller), or the shielded drain waits its 10 s for it.
    peer = Peer(new_identity())
    started = trio.Event()

    @peer.capability("org.example.slow")
    async def slow() -> str:
        started.set()
        await trio.sleep(30)
        return "late"

    outcome: list[int] = []

    async def serve_until_cancelled(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            async with peer.serve("amp://127.0.0.1:0") as server:
                task_status.started((server.url, scope))
                await trio.sleep_forever()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            url, scope = await nursery.start(serve_until_cancelled)
            async with connect(url, identity=new_identity()) as remote:
                async def call() -> None:
                    with pytest.raises(AmpError) as info:
                        await remote.invoke("org.example.slow:1.0.0", timeout=20)
                    outcome.append(info.value.code)

                async with trio.open_nursery() as calls:
                    calls.start_soon(call)
                    await started.wait()
                    t0 = trio.current_time()
                    scope.cancel()
            assert trio.current_time() - t0 < 2
    assert outcome == [5002]


@pytest.mark.trio
async def test_connect_refused_is_5002_not_a_hang() -> None:
    # An AmpError like every other failure of the API, and still an OSError.
    for url in ("amp://127.0.0.1:1", "amp://no-such-host.invalid:7700"):
        with trio.fail_after(10), pytest.raises(AmpError) as info:
            async with connect(url, identity=new_identity()):
                pass
        assert info.value.code == 5002 and f"cannot reach {url}" in info.value.message
        assert isinstance(info.value, OSError)
    with pytest.raises(ValueError):
        async with connect("ftp://127.0.0.1:1", identity=new_identity()):
            pass


# -------------------------------------------- A.12 / A.13: wrong reply_to


class MisroutingProvider:
    """Answers every CAP_INVOKE / CAP_QUERY with a reply whose reply_to is wrong."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.identity = new_identity()
        conn = Connection(role=Role.SERVER, identity=self.identity, pipeline=ReceivePipeline(DidKeyResolver()),
                          entropy=os.urandom)
        self.driver = ConnectionDriver(conn, stream, on_event=self.on_event)
        self.received: list[Inbound] = []
        self.sent_ids: list[bytes] = []

    async def on_event(self, event: Event) -> None:
        if not isinstance(event, MessageReceived):
            return
        inbound = event.inbound
        self.received.append(inbound)
        typ = inbound.envelope.typ
        wrong = os.urandom(16)
        if typ == int(MessageType.CAP_INVOKE):
            env = self.driver.send_nowait(Outbound(typ=RESULT, body={"status": "success", "result": 1},
                                                   reply_to=wrong))
            self.sent_ids.append(env.id)
        elif typ == int(MessageType.CAP_QUERY):
            descriptor = demo_manifest().capabilities[0].descriptor.to_wire()  # a schema-valid declare
            env = self.driver.send_nowait(Outbound(typ=DECLARE, body={"capabilities": [descriptor]},
                                                   reply_to=wrong))
            self.sent_ids.append(env.id)


@asynccontextmanager
async def calling(provider_type: type[MisroutingProvider]) -> AsyncIterator[tuple[Remote, MisroutingProvider]]:
    """A daemon with no capabilities of its own, connected to a test provider."""
    daemon = Daemon(new_identity(), Catalog([], cursor_key=os.urandom(32)))
    ours, theirs = trio.testing.memory_stream_pair()
    provider = provider_type(theirs)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        nursery.start_soon(provider.driver.run)
        yield Remote(daemon, await daemon.connect_stream(ours)), provider
        await daemon.drain(0.1)
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a12_a13_wrong_reply_to_rejected_with_4001() -> None:
    async with calling(MisroutingProvider) as (remote, provider):
        with pytest.raises(AmpError) as info:
            await remote.invoke("org.x.y:1.0.0", params={}, timeout=0.5)
        assert info.value.code == 5003  # the misrouted CAP_RESULT did not complete the call
        with pytest.raises(AmpError) as info:
            await remote.query("org.x.y", timeout=0.5)
        assert info.value.code == 5003
        errors = [m for m in provider.received if m.envelope.typ == ERROR]
        assert [e.body["code"] for e in errors] == [4001, 4001]
        assert [e.envelope.reply_to for e in errors] == provider.sent_ids


class FloodingProvider(MisroutingProvider):
    """Answers one CAP_INVOKE with fifty CAP_RESULTs that match nothing."""

    async def on_event(self, event: Event) -> None:
        if not isinstance(event, MessageReceived):
            return
        self.received.append(event.inbound)
        if event.inbound.envelope.typ != int(MessageType.CAP_INVOKE):
            return
        for _ in range(50):
            env = self.driver.send_nowait(Outbound(typ=RESULT, body={"status": "success", "result": 1},
                                                   reply_to=os.urandom(16)))
            self.sent_ids.append(env.id)


@pytest.mark.trio
async def test_a_peer_cannot_flood_the_log_with_unmatched_replies(caplog: pytest.LogCaptureFixture) -> None:
    # Every unmatched reply still gets its ERROR 4001 (A.12), but only the
    # first ten make a WARNING line; one more line says the rest went to DEBUG.
    caplog.set_level(logging.DEBUG, logger="ampcap")
    async with calling(FloodingProvider) as (remote, provider):
        with pytest.raises(AmpError):
            await remote.invoke("org.x.y:1.0.0", params={}, timeout=0.5)
        errors = [m for m in provider.received if m.envelope.typ == ERROR]
        assert [e.body["code"] for e in errors] == [4001] * 50
    unmatched = [r for r in caplog.records if "matches no pending call" in r.getMessage()]
    assert len(unmatched) == 50
    assert [r.levelno for r in unmatched] == [logging.WARNING] * 10 + [logging.DEBUG] * 40
    notices = [r for r in caplog.records if "'unmatched reply' lines" in r.getMessage()]
    assert len(notices) == 1 and notices[0].levelno == logging.WARNING


class MalformedProvider(MisroutingProvider):
    """Answers the right reply_to, but with a CAP_RESULT lacking its result,
    then an ERROR lacking its category: bodies the receive checks refuse."""

    async def on_event(self, event: Event) -> None:
        if not isinstance(event, MessageReceived) or event.inbound.envelope.typ != int(MessageType.CAP_INVOKE):
            return
        self.received.append(event.inbound)
        body: dict[str, Any] = {"status": "success"} if len(self.received) == 1 else {"code": 5004}
        typ = RESULT if len(self.received) == 1 else ERROR
        self.driver.send_nowait(Outbound(typ=typ, body=body, reply_to=event.inbound.envelope.id))


@pytest.mark.trio
async def test_a_malformed_reply_fails_the_call_at_once_with_1001() -> None:
    # Not a 5003 after the whole timeout (which --retry would resend): the
    # reply came and was refused, and nothing better will follow it.
    async with calling(MalformedProvider) as (remote, provider):
        for _ in range(2):
            with trio.fail_after(5), pytest.raises(AmpError) as info:
                await remote.invoke("org.x.y:1.0.0", params={}, timeout=60, retry=True)
            assert info.value.code == 1001 and "was refused" in info.value.message
        assert len(provider.received) == 2  # no resend


def greet_v2(params: Any) -> dict:
    return {"text": f"hello {params['who']}"}


def v1_params(params: Any, requested: str) -> dict:
    return {"who": params["name"]}


def v1_result(result: Any, requested: str) -> dict:
    return {"greeting": result["text"], "version": requested}


@pytest.mark.trio
async def test_bridge_adapts_params_and_result_end_to_end() -> None:
    from ampcap.caps.manifest import manifest_from_data

    manifest = manifest_from_data({"capability": [
        {"id": "org.example.greet:2.0.0", "input_schema": {"type": "object", "required": ["who"]},
         "output_schema": {}, "policy": "bridge", "supported_ranges": [">=1.0.0 <3.0.0"],
         "bridge": {"params": f"{__name__}:v1_params", "result": f"{__name__}:v1_result"},
         "notes": "serves 1.x: name becomes who, text becomes greeting",
         "binding": {"python": f"{__name__}:greet_v2"}}]}, source="<test>")
    provider = Peer(new_identity(), manifest=manifest)
    async with provider.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        old = await remote.invoke("org.example.greet", version="1.4.0", params={"name": "Ada"})
        assert old == {"greeting": "hello Ada", "version": "1.4.0"}
        new = await remote.invoke("org.example.greet:2.0.0", params={"who": "Bo"})
        assert new == {"text": "hello Bo"}


@pytest.mark.trio
async def test_a_peer_serves_amps_with_its_tls_context_and_callers_trust_it_explicitly(tmp_path: Path) -> None:
    from amp_helpers import self_signed_cert

    from ampcap.net.transport.tls import client_context, server_context

    cert, key = self_signed_cert(tmp_path)
    provider = Peer(new_identity(), tls=server_context(cert, key))

    @provider.capability("org.example.secret", version="1.0.0")
    async def secret(word: str) -> dict:
        return {"heard": word}

    with trio.fail_after(20):
        async with provider.serve("amps://127.0.0.1:0") as server:
            assert server.url.startswith("amps://127.0.0.1:")
            async with connect(server.url, identity=new_identity(),
                               ssl_context=client_context(ca_file=cert)) as remote:
                assert await remote.invoke("org.example.secret:1.0.0", params={"word": "hi"}) == {"heard": "hi"}
                assert remote.did == provider.did
            with pytest.raises(AmpError) as info:  # the system store does not know a self-signed certificate
                async with connect(server.url, identity=new_identity()):
                    pass
            assert info.value.code == 5002 and "certificate is not trusted" in info.value.message
    # Past --max-connections, a TLS client is refused inside TLS: 5004, not a broken handshake.
    from ampcap.net.daemon.core import DaemonConfig

    busy = Peer(new_identity(), tls=server_context(cert, key), config=DaemonConfig(max_connections=1))
    with trio.fail_after(20):
        async with busy.serve("amps://127.0.0.1:0") as server:
            async with connect(server.url, identity=new_identity(), ssl_context=client_context(ca_file=cert)):
                with pytest.raises(AmpError) as info:
                    async with connect(server.url, identity=new_identity(),
                                       ssl_context=client_context(ca_file=cert)):
                        pass
                assert info.value.code == 5004, info.value
    # One daemon, one TLS setting: the URL's scheme must match it.
    with pytest.raises(ValueError, match="Peer\\(tls="):
        async with Peer(new_identity()).serve("amps://127.0.0.1:0"):
            pass
    with pytest.raises(ValueError, match="serve an amps:// URL"):
        async with Peer(new_identity(), tls=server_context(cert, key)).serve("amp://127.0.0.1:0"):
            pass


@pytest.mark.trio
async def test_timeouts_and_limits_outside_what_the_wire_can_say() -> None:
    import math

    peer = make_peer()
    async with peer.serve("amp://127.0.0.1:0") as server, connect(server.url, identity=new_identity()) as remote:
        # No limit: the provider's own cap ends the call if anything does.
        for forever in (math.inf, 1e308):
            assert await remote.invoke("org.example.greet:1.0.0", params={"name": "x"}, timeout=forever) == {
                "greeting": "Hello, x."}
        for bad in (0, -1, math.nan):
            with pytest.raises(ValueError, match="positive number of seconds"):
                await remote.invoke("org.example.greet:1.0.0", params={"name": "x"}, timeout=bad)
        with pytest.raises(ValueError, match="limit must be from 0 to"):
            await remote.query("org.example.greet", limit=1 << 64)
        assert len((await remote.query("org.example.greet", limit=(1 << 64) - 1)).capabilities) == 2


class Thing:
    """No JSON Schema can be derived for a plain class."""


def test_registration_mistakes_are_reported_at_the_decorator() -> None:
    peer = Peer(new_identity())

    def fn() -> dict:
        return {}

    class Local:
        pass

    def takes_a_thing(x: Thing) -> dict:
        return {}

    def takes_a_local(x: Local) -> dict:  # under `from __future__ import annotations`: unresolvable
        return {}

    with pytest.raises(ValueError, match="capability Not A Name:1.0.0: name: capability name 'Not A Name' must be"):
        peer.capability("Not A Name")(fn)
    with pytest.raises(ValueError, match="version: bad version '1.0'"):
        peer.capability("org.example.v", version="1.0")(fn)
    with pytest.raises(ValueError, match="input_schema: input schema does not compile"):
        peer.capability("org.example.s", schema={"type": "nonsense"})(fn)
    with pytest.raises(TypeError, match="type of parameter 'x' \\(Thing\\); give the capability an explicit schema"):
        peer.capability("org.example.t")(takes_a_thing)
    with pytest.raises(TypeError, match="takes_a_local: its type hints cannot be resolved .*explicit schema"):
        peer.capability("org.example.u")(takes_a_local)
    peer.capability("org.example.once")(fn)
    with pytest.raises(ValueError, match="org.example.once:1.0.0 is already registered"):
        peer.capability("org.example.once")(fn)
    assert [r.name for r in peer._capabilities._registered] == ["org.example.once"]  # the refused ones left no trace


def test_a_function_taking_kwargs_accepts_any_params() -> None:
    def anything(**params: Any) -> dict:
        return params

    def exact(a: int) -> dict:
        return {}

    assert schema_from_signature(anything)["additionalProperties"] is True
    assert schema_from_signature(exact)["additionalProperties"] is False


@pytest.mark.trio
async def test_a_result_over_the_maximum_message_size_still_ends_the_call_once(
        caplog: pytest.LogCaptureFixture) -> None:
    from ampcap.net.daemon.core import DaemonConfig
    from ampcap.peer.config import ConnectionConfig

    small = DaemonConfig(connection=ConnectionConfig(max_msg_size=1 << 20))  # the smallest RFC 002 allows
    provider = Peer(new_identity(), config=small)

    @provider.capability("org.example.blob", schema={"type": "object"})
    def blob(**params: Any) -> dict:
        return {"blob": b"x" * (2 << 20)}

    @provider.capability("org.example.size", schema={"type": "object"})
    def size(**params: Any) -> dict:
        return {"n": len(params.get("data", b""))}

    with trio.fail_after(20):
        async with provider.serve("amp://127.0.0.1:0") as server, \
                connect(server.url, identity=new_identity()) as remote:
            with pytest.raises(AmpError) as info:  # a small CAP_RESULT 5001 stood in for the large one
                await remote.invoke("org.example.blob:1.0.0", params={}, timeout=10)
            assert info.value.code == 5001
            assert "larger than this connection's 1048576-byte maximum" in info.value.message
            assert any("sent a 5001 in its place" in r.getMessage() for r in caplog.records)
            # Our own request over the limit fails at once, as the caller's fault (1001, not retryable).
            with pytest.raises(AmpError) as info:
                await remote.invoke("org.example.size:1.0.0", params={"data": b"y" * (2 << 20)}, timeout=10)
            assert info.value.code == 1001 and "exceeds the effective maximum 1048576" in info.value.message
            assert await remote.invoke("org.example.size:1.0.0", params={"data": b"y"}) == {"n": 1}


@pytest.mark.trio
async def test_policy_and_manifest_may_be_given_as_files(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(f'''
[[capability]]
id = "org.example.greet:2.0.0"
input_schema = {{ type = "object", required = ["who"] }}
output_schema = {{}}
binding = {{ python = "{__name__}:greet_v2" }}
''')
    caller = new_identity()
    policy = tmp_path / "policy.toml"
    policy.write_text(f'default = "allow"\n[[capability]]\nmatch = "org.example.*"\ndeny = ["{caller.did}"]\n')
    provider = Peer(new_identity(), manifest=manifest, policy=str(policy))

    @provider.capability("org.other.ping", version="1.0.0")
    async def ping() -> dict:
        return {"pong": True}

    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as anyone:
            assert await anyone.invoke("org.example.greet:2.0.0", params={"who": "Bo"}) == {"text": "hello Bo"}
        async with connect(server.url, identity=caller) as denied:
            assert await denied.invoke("org.other.ping:1.0.0") == {"pong": True}
            with pytest.raises(AmpError) as refused:
                await denied.invoke("org.example.greet:2.0.0", params={"who": "Bo"})
            assert refused.value.code == 3001


def test_a_bad_policy_or_manifest_file_fails_when_the_peer_is_made(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('default = "maybe"\n')
    with pytest.raises(AmpError) as bad_policy:
        Peer(new_identity(), policy=tmp_path / "p.toml")
    assert bad_policy.value.code == 4001 and "p.toml" in bad_policy.value.message
    (tmp_path / "m.toml").write_text('[[capability]]\nid = "org.example.x:1.0.0"\ninput_schema = {}\n'
                                     'output_schema = {}\nbinding = { python = "no_such_module_here:f" }\n')
    with pytest.raises(AmpError) as bad_manifest:
        Peer(new_identity(), manifest=tmp_path / "m.toml")
    assert bad_manifest.value.code == 4001 and "no_such_module_here" in bad_manifest.value.message
    with pytest.raises(AmpError, match="cannot read"):
        Peer(new_identity(), manifest=tmp_path / "missing.toml")


@pytest.mark.trio
async def test_connecting_to_a_peer_with_our_own_did_is_refused_before_any_request() -> None:
    """Issue 26: one identity on both sides is one agent calling itself."""
    from ampcap.net.api.peer import CallsItself

    me = new_identity()
    server_peer = Peer(me)
    async with server_peer.serve("amp://127.0.0.1:0") as server:
        # Named up front (relay_to, peer_did): refused before dialling, so a
        # URL nobody listens at makes no difference.
        for kwargs in ({"relay_to": me.did}, {"peer_did": me.did}):
            with pytest.raises(CallsItself, match="own DID"):
                async with Peer(me).connect("amp://127.0.0.1:9", **kwargs):
                    pass
        # Learned from the peer's HELLO: refused before any request is sent.
        with pytest.raises(CallsItself) as caught:
            async with connect(server.url, identity=me):
                pass
        assert caught.value.did == me.did and isinstance(caught.value, ValueError)
        async with connect(server.url, identity=new_identity()):  # another identity is fine
            pass


@pytest.mark.trio
async def test_an_ossa_uri_alone_invokes_ossas_compatible_range(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 26: ossa:d/n@M.m names MAJOR.MINOR; OSSA's rule (same major,
    minor at least m) is the range >=M.m.0 <M+1.0.0, asked for as such."""
    provider = Peer(new_identity())

    for version in ("1.1.0", "1.3.0", "2.0.0"):
        @provider.capability("org.example.add", version=version, aliases=["ossa:example/add@1.2"])
        async def add(a: int, b: int, _v: str = version) -> dict[str, Any]:
            return {"sum": a + b, "version": _v}

    async with provider.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=new_identity()) as remote:
            with caplog.at_level(logging.INFO, logger="ampcap"):
                assert await remote.invoke("ossa:example/add@1.2", params={"a": 2, "b": 40}) == \
                    {"sum": 42, "version": "1.3.0"}
            with pytest.raises(ValueError, match="not a valid capability URI"):
                await remote.invoke("ossa:example/add@1.x", params={})
    # The URI is how OSSA names it, not a deprecated alias: no warning.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records
    assert any("capability URI 'ossa:example/add@1.2' resolves to" in r.getMessage() for r in caplog.records)
