"""OpenTelemetry tracing (issue 33): a span per invoke on both sides, the
caller's trace context in a self-signed ``ext`` entry (``ampcap.trace``,
wire/trace_context.py) so that nested invokes join one trace, bad entries
from the network ignored, and nothing of OpenTelemetry loaded by a daemon
that does not trace. Real daemons over TCP and the real OpenTelemetry SDK
(its InMemorySpanExporter is part of opentelemetry-sdk)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from amp_helpers import PYTHON, _read_line, new_identity  # noqa: E402
from processes import stop_process  # noqa: E402

from ampcap.errors import AmpError  # noqa: E402
from ampcap.net.api.peer import Peer, connect  # noqa: E402
from ampcap.wire.extensions import TRACE  # noqa: E402
from ampcap.wire.trace_context import (  # noqa: E402
    EXT_KEY,
    TraceParent,
    parse_traceparent,
    parse_tracestate,
    read_entry,
    signed_entry,
)

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def recorder() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def only(exporter: InMemorySpanExporter, kind: SpanKind) -> ReadableSpan:
    spans = [s for s in exporter.get_finished_spans() if s.kind is kind]
    assert len(spans) == 1, [(s.name, s.kind) for s in exporter.get_finished_spans()]
    return spans[0]


# ----------------------------------------------------------------- the entry


def test_traceparent_is_read_strictly() -> None:
    parsed = parse_traceparent(GOOD)
    assert parsed == TraceParent(trace_id=0x4bf92f3577b34da6a3ce929d0e0e4736, span_id=0x00f067aa0ba902b7, flags=1)
    assert parsed is not None and parsed.header() == GOOD
    later = "cc" + GOOD[2:] + "-what-a-later-version-adds"
    assert parse_traceparent(later) == parsed  # a later version: its first four fields
    for bad in (GOOD.upper(), GOOD + "-x", "ff" + GOOD[2:], GOOD.replace("4bf9", "4bfz"), GOOD[:-1],
                "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
                "cc" + GOOD[2:] + "x", "cc" + GOOD[2:] + "-" + "a" * 300, "", None, 7, b"00-", ["00"],
                GOOD.replace("-", "_")):
        assert parse_traceparent(bad) is None, bad
    assert parse_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    assert parse_tracestate(" t@sys=1, b=x y ,,c=-\t") == "t@sys=1,b=x y,c=-"
    for bad in ("", "x" * 513, "a=1\n", "novalue", ",".join(f"k{i}=v" for i in range(33)), 5, "é=1",
                "Upper=1", "a=1,a=2", "a=x=y", "1abc=1", "a=", "a=1 2=3"):
        assert parse_tracestate(bad) is None, bad


def test_the_entry_verifies_only_as_signed_for_its_message() -> None:
    me = new_identity()
    key = lambda did: me.public_key  # noqa: E731
    parent = TraceParent(trace_id=1, span_id=2, flags=1, tracestate="a=1")
    ext = signed_entry(me.sign, me.did, b"m" * 16, parent)
    assert set(ext[EXT_KEY]) == {"traceparent", "tracestate", "sig"}
    assert read_entry(ext, me.did, b"m" * 16, key) == parent
    assert read_entry(ext, me.did, b"x" * 16, key) is None  # cut from another message
    assert read_entry(ext, new_identity().did, b"m" * 16, key) is None  # said to be another sender's
    for field, value in (("traceparent", GOOD), ("tracestate", "a=2"), ("sig", bytes(64))):
        altered = {EXT_KEY: {**ext[EXT_KEY], field: value}}
        assert read_entry(altered, me.did, b"m" * 16, key) is None, field  # changed on the way: ignored
    dropped = {EXT_KEY: {k: v for k, v in ext[EXT_KEY].items() if k != "tracestate"}}
    assert read_entry(dropped, me.did, b"m" * 16, key) is None  # tracestate is signed too
    for junk in (None, {}, {EXT_KEY: "x"}, {EXT_KEY: {"traceparent": GOOD}}, {EXT_KEY: {"traceparent": 1, "sig": b""}}):
        assert read_entry(junk, me.did, b"m" * 16, key) is None
    unresolvable = lambda did: (_ for _ in ()).throw(AmpError(3001, "unknown"))  # noqa: E731
    assert read_entry(ext, me.did, b"m" * 16, unresolvable) is None


# ---------------------------------------------------------- between daemons


@pytest.mark.trio
async def test_a_span_per_invoke_with_its_capability_caller_and_outcome() -> None:
    server_provider, served = recorder()
    caller_provider, called = recorder()
    peer = Peer(new_identity(), tracing=server_provider)

    @peer.capability("org.example.half", "1.2.0")
    async def half(n: int) -> dict:
        if n % 2:
            raise AmpError(4001, "odd")
        return {"n": n // 2}

    caller = new_identity()
    async with peer.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=caller, tracing=caller_provider) as remote:
            assert await remote.invoke("org.example.half", version="1.2.0", params={"n": 4}) == {"n": 2}
            server_span, client_span = only(served, SpanKind.SERVER), only(called, SpanKind.CLIENT)
            served.clear()
            called.clear()
            with pytest.raises(AmpError) as failed:
                await remote.invoke("org.example.half:1.2.0", params={"n": 3})
            assert failed.value.code == 4001
            with pytest.raises(AmpError):
                await remote.invoke("org.example.nosuch:1.0.0")
    assert server_span.name == "org.example.half:1.2.0"
    attrs = server_span.attributes or {}
    assert attrs["ampcap.capability.name"] == "org.example.half" and attrs["ampcap.capability.version"] == "1.2.0"
    assert attrs["ampcap.caller"] == caller.did and attrs["ampcap.outcome"] == "ok"
    assert server_span.status.status_code is StatusCode.UNSET
    assert client_span.name == "org.example.half" and (client_span.attributes or {})["ampcap.provider"] == peer.did
    assert (client_span.attributes or {})["ampcap.invoke_id"] == attrs["ampcap.invoke_id"]  # the same invoke
    assert server_span.parent is not None and server_span.parent.span_id == client_span.context.span_id
    assert server_span.context.trace_id == client_span.context.trace_id
    failures = sorted(served.get_finished_spans(), key=lambda s: s.name)
    assert [(s.name, (s.attributes or {})["ampcap.outcome"]) for s in failures] == [
        ("org.example.half:1.2.0", "4001"), ("org.example.nosuch:1.0.0", "4002")]
    assert all(s.status.status_code is StatusCode.ERROR for s in failures)
    assert failures[0].status.description == "4001 BAD_REQUEST"
    assert sorted((s.attributes or {})["ampcap.outcome"] for s in called.get_finished_spans()) == ["4001", "4002"]


@pytest.mark.trio
async def test_nested_invokes_across_three_daemons_join_one_trace() -> None:
    (pa, a_spans), (pb, b_spans), (pc, c_spans) = recorder(), recorder(), recorder()
    c = Peer(new_identity(), tracing=pc)

    @c.capability("org.example.leaf", "1.0.0")
    async def leaf(x: int) -> dict:
        return {"x": x + 1}

    b = Peer(new_identity(), tracing=pb)
    async with c.serve("amp://127.0.0.1:0") as c_server:

        @b.capability("org.example.middle", "1.0.0")
        async def middle(x: int) -> dict:
            async with b.connect(c_server.url) as to_c:  # a call made while serving: the span is current
                async with trio.open_nursery() as nursery:  # in a task it starts too
                    got: list[Any] = []

                    async def call() -> None:
                        got.append(await to_c.invoke("org.example.leaf:1.0.0", params={"x": x}))

                    nursery.start_soon(call)
                return {"x": got[0]["x"] * 10}

        async with b.serve("amp://127.0.0.1:0") as b_server:
            async with connect(b_server.url, identity=new_identity(), tracing=pa) as to_b:
                assert await to_b.invoke("org.example.middle:1.0.0", params={"x": 1}) == {"x": 20}
    a_client = only(a_spans, SpanKind.CLIENT)
    b_server, b_client = only(b_spans, SpanKind.SERVER), only(b_spans, SpanKind.CLIENT)
    c_server = only(c_spans, SpanKind.SERVER)
    trace_id = a_client.context.trace_id
    assert {s.context.trace_id for s in (a_client, b_server, b_client, c_server)} == {trace_id}
    assert a_client.parent is None
    chain = [(b_server, a_client), (b_client, b_server), (c_server, b_client)]
    for child, parent in chain:
        assert child.parent is not None and child.parent.span_id == parent.context.span_id, (child.name, parent.name)
    assert b_server.parent is not None and b_server.parent.is_remote and not b_client.parent.is_remote  # type: ignore[union-attr]
    assert (c_server.attributes or {})["ampcap.caller"] == b.did


async def _send_with_ext(remote: Any, capability: str, ext_for: Callable[[bytes], Any]) -> Any:
    """One CAP_INVOKE whose envelope ``ext`` is ``ext_for(id)``, as a peer
    on the network could send it (the ext is outside the signature)."""
    daemon, link = remote._daemon, remote._link
    handle, out = daemon.invoker.start_invoke(link, capability, {"x": 1}, timeout_ms=10_000, to=link.peer_did,
                                              ext_for=ext_for, now_ms=daemon.clock.wall_ms())
    outcome = daemon.calls.register(link, handle, out, None)
    await outcome.done.wait()
    assert outcome.error is None, outcome.error
    return outcome.result


@pytest.mark.trio
async def test_bad_or_altered_entries_from_the_network_are_ignored() -> None:
    provider, spans = recorder()
    peer = Peer(new_identity(), tracing=provider)

    @peer.capability("org.example.echo", "1.0.0")
    async def echo(x: int) -> dict:
        return {"x": x}

    caller = new_identity()
    caller_provider, _ = recorder()

    def signed(traceparent: Any, tracestate: Any = None, *, alter: dict[str, Any] | None = None) -> Any:
        def ext_for(message_id: bytes) -> dict[str, Any]:
            from ampcap.wire.cbor import dumps

            entry: dict[str, Any] = {"traceparent": traceparent}
            if tracestate is not None:
                entry["tracestate"] = tracestate
            entry["sig"] = caller.sign(dumps(["ampcap.trace/1", caller.did, message_id, traceparent, tracestate]))
            entry.update(alter or {})
            return {EXT_KEY: entry}
        return ext_for

    cases = {
        "malformed": signed("00-xyz"),
        "oversized": signed("cc" + GOOD[2:] + "-" + "a" * 10_000),
        "zero trace id": signed("00-" + "0" * 32 + "-00f067aa0ba902b7-01"),
        "not text": signed(12345),
        "tampered": signed(GOOD, alter={"traceparent": GOOD.replace("4bf9", "aaaa")}),
        "unsigned": signed(GOOD, alter={"sig": b"\0" * 64}),
        "not a map": lambda mid: {EXT_KEY: [GOOD]},
        "huge tracestate": signed(GOOD, "k=" + "v" * 100_000),
    }
    async with peer.serve("amp://127.0.0.1:0") as server:
        async with connect(server.url, identity=caller, tracing=caller_provider) as remote:
            assert TRACE in remote._link.driver.conn.extensions  # both trace: the entry is read
            for case, ext_for in cases.items():
                spans.clear()
                assert await _send_with_ext(remote, "org.example.echo:1.0.0", ext_for) == {"x": 1}, case
                span = only(spans, SpanKind.SERVER)
                assert span.parent is None, case  # a new trace, the entry ignored
                assert (span.attributes or {})["ampcap.outcome"] == "ok", case
            spans.clear()
            await _send_with_ext(remote, "org.example.echo:1.0.0", signed(GOOD, "bad state\x01"))
            kept = only(spans, SpanKind.SERVER)  # a signed, well-formed traceparent beside a bad tracestate
            assert kept.parent is not None and kept.context.trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736
            assert kept.parent.span_id == 0x00f067aa0ba902b7 and not kept.context.trace_state
            spans.clear()
            await _send_with_ext(remote, "org.example.echo:1.0.0", signed(GOOD, "congo=t61rcWkgMzE, rojo=1"))
            joined = only(spans, SpanKind.SERVER)
            assert joined.context.trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736
            assert dict(joined.context.trace_state) == {"congo": "t61rcWkgMzE", "rojo": "1"}  # handed on


@pytest.mark.trio
async def test_only_peers_that_both_trace_exchange_the_entry() -> None:
    provider, spans = recorder()
    traced = Peer(new_identity(), tracing=provider)
    plain = Peer(new_identity())

    for p in (traced, plain):
        @p.capability("org.example.echo", "1.0.0")
        async def echo(x: int) -> dict:
            return {"x": x}

    caller = new_identity()
    async with plain.serve("amp://127.0.0.1:0") as plain_server, traced.serve("amp://127.0.0.1:0") as traced_server:
        caller_provider, called = recorder()
        async with connect(plain_server.url, identity=caller, tracing=caller_provider) as remote:
            assert TRACE not in remote._link.driver.conn.extensions  # the daemon does not trace: not agreed
            span, ext_for = remote._daemon.tracing.calling(remote._link, "org.example.echo:1.0.0", None)
            assert ext_for(b"m" * 16) is None  # so no entry is sent
            span.end()
            assert await remote.invoke("org.example.echo:1.0.0", params={"x": 2}) == {"x": 2}
            assert len(called.get_finished_spans()) == 2  # the client still has its span
        async with connect(traced_server.url, identity=new_identity()) as untraced:
            assert TRACE not in untraced._link.driver.conn.extensions
            good = TraceParent(trace_id=5, span_id=6, flags=1)
            me = untraced._daemon.identity
            # A caller that did not announce ampcap.trace: an entry it sends anyway is not read.
            await _send_with_ext(untraced, "org.example.echo:1.0.0",
                                 lambda mid: signed_entry(me.sign, me.did, mid, good))
            assert only(spans, SpanKind.SERVER).parent is None


@pytest.mark.trio
async def test_open_spans_are_bounded() -> None:
    from ampcap.net.features.tracing import trace_daemon

    provider, spans = recorder()
    peer = Peer(new_identity())
    release = trio.Event()

    @peer.capability("org.example.wait", "1.0.0")
    async def wait(i: int) -> dict:
        await release.wait()
        return {"i": i}

    async with peer.serve("amp://127.0.0.1:0") as server:
        trace_daemon(server.daemon, provider, max_open=2)  # before anyone connects: offered in HELLO
        async with connect(server.url, identity=new_identity()) as remote:
            results: list[Any] = []
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(lambda i=i: _collect(remote, i, results))
                    await trio.sleep(0.05)  # in this order
                await trio.sleep(0.1)
                abandoned = spans.get_finished_spans()
                assert [(s.attributes or {})["ampcap.outcome"] for s in abandoned] == ["abandoned"]
                release.set()
    assert sorted(r["i"] for r in results) == [0, 1, 2]  # the invokes themselves are unaffected
    outcomes = [(s.attributes or {})["ampcap.outcome"] for s in spans.get_finished_spans()]
    assert outcomes == ["abandoned", "ok", "ok"]


async def _collect(remote: Any, i: int, into: list[Any]) -> None:
    into.append(await remote.invoke("org.example.wait:1.0.0", params={"i": i}))


# ------------------------------------------------------ the command line


def _serve(tmp: Path, *args: str, importtime: bool = False, state: bool = False) -> subprocess.Popen[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"), PYTHONUNBUFFERED="1")
    cmd = [PYTHON, *(["-X", "importtime"] if importtime else []), "-m", "ampcap.cli.main", "serve", "--demo",
           "--listen", "127.0.0.1:0", "--state-dir", str(tmp / "state") if state else "none", *args]
    with open(tmp / "serve.err", "w") as err:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)




def _invoke(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "caller-config"))
    return subprocess.run([PYTHON, "-m", "ampcap.cli.main", "invoke", url, "org.ampcap.demo.math.add:1.0.0",
                           "--params", '{"a": 1, "b": 2}', *args], capture_output=True, text=True, env=env, timeout=60)


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_serve_and_invoke_trace_to_files_and_join_one_trace(tmp_path: Path) -> None:
    served, called = tmp_path / "served.jsonl", tmp_path / "called.jsonl"
    proc = _serve(tmp_path, "--trace", str(served), state=True)  # the journal holds replies until committed
    try:
        url = _read_line(proc, 30.0).split()[0]
        done = _invoke(tmp_path, url, "--trace", str(called))
        assert done.returncode == 0, done.stderr
    finally:
        stop_process(proc)
    assert proc.returncode == 0
    (client,), (server,) = _spans(called), _spans(served)  # the daemon flushed its spans when it stopped
    assert client["kind"] == "SpanKind.CLIENT" and server["kind"] == "SpanKind.SERVER"
    assert server["context"]["trace_id"] == client["context"]["trace_id"]
    assert server["parent_id"] == client["context"]["span_id"]
    assert server["name"] == "org.ampcap.demo.math.add:1.0.0" and server["attributes"]["ampcap.outcome"] == "ok"
    assert server["resource"]["attributes"]["service.name"] == "ampcap serve"


def test_a_daemon_that_does_not_trace_never_imports_opentelemetry(tmp_path: Path) -> None:
    for traced in (False, True):
        spans = tmp_path / "spans.jsonl"
        proc = _serve(tmp_path, *(["--trace", str(spans)] if traced else []), importtime=True)
        try:
            url = _read_line(proc, 30.0).split()[0]
            done = _invoke(tmp_path, url)  # a plain invoke, served
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == {"sum": 3} or "3" in done.stdout
        finally:
            stop_process(proc)
        imported = [line.rsplit("|", 1)[-1].strip() for line in (tmp_path / "serve.err").read_text().splitlines()
                    if line.startswith("import time:")]
        assert "ampcap.net.daemon.jobs" in imported  # it did serve (-X importtime reports every import)
        otel = [m for m in imported if m.startswith(("opentelemetry", "ampcap.net.features.tracing",
                                                     "ampcap.wire.trace_context"))]
        assert bool(otel) is traced, otel[:5]


def test_trace_without_a_usable_exporter_is_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = subprocess.run([PYTHON, "-m", "ampcap.cli.main", "invoke", "amp://127.0.0.1:9", "x:1.0.0",
                           "--trace", str(tmp_path / "no" / "such" / "dir" / "spans")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "cannot write spans to" in done.stderr and len(done.stderr.strip().splitlines()) == 1
