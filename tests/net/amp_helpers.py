"""Shared by the daemon / integration / shutdown / soak tests.

* :class:`RawPeer`: a bare client Connection that sends exactly the messages
  a test builds (chosen ids, duplicates, odd bodies) and records every
  verified message it receives, raw bytes included.
* :func:`serve_process`: ``ampcap serve`` in a separate process; reads its
  one URL line; SIGTERM on exit.
* :func:`demo_daemon`: the same daemon in-process, reachable over
  ``trio.testing.memory_stream_pair``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from processes import ProcessHandle, stop_process  # tests/processes.py

from ampcap.caps.catalog import Catalog
from ampcap.caps.demo import demo_manifest
from ampcap.caps.params import ParamsValidator
from ampcap.net.daemon.core import Daemon, DaemonConfig
from ampcap.net.transport.stream import ConnectionDriver, open_stream
from ampcap.net.transport.url import parse_url
from ampcap.peer.connection import Connection, Role
from ampcap.peer.events import ConnectionTerminated, Event, MessageReceived, Negotiated
from ampcap.peer.outbound import Outbound
from ampcap.peer.policy import ALLOW_ALL, Policy
from ampcap.wire.envelope import Envelope, new_message_id
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.receive import Inbound, ReceivePipeline
from ampcap.wire.registry import MessageType

INVOKE, RESULT, ERROR = int(MessageType.CAP_INVOKE), int(MessageType.CAP_RESULT), int(MessageType.ERROR)
QUERY, DECLARE = int(MessageType.CAP_QUERY), int(MessageType.CAP_DECLARE)
PROGRESS = int(MessageType.PROGRESS)
TERMINAL = frozenset({RESULT, ERROR, DECLARE})
ECHO = "org.ampcap.demo.echo"
PYTHON = sys.executable


def new_identity() -> Identity:
    return Identity.generate(os.urandom)


# ------------------------------------------------------------- raw client


@dataclass
class RawPeer:
    driver: ConnectionDriver
    identity: Identity
    inbox: list[Inbound] = field(default_factory=list)
    terminated: ConnectionTerminated | None = None
    _changed: trio.Event = field(default_factory=trio.Event)
    negotiated: trio.Event = field(default_factory=trio.Event)

    async def on_event(self, event: Event) -> None:
        if isinstance(event, MessageReceived):
            self.inbox.append(event.inbound)
        elif isinstance(event, Negotiated):
            self.negotiated.set()
        elif isinstance(event, ConnectionTerminated):
            self.terminated = event
            self.negotiated.set()
        self._changed.set()
        self._changed = trio.Event()

    def send(self, typ: int, body: Any, *, msg_id: bytes | None = None, ts_ms: int | None = None,
             reply_to: bytes | None = None, ttl_ms: int | None = 600_000, to: str | None = None,
             ext: dict[str, Any] | None = None) -> Envelope:
        now = time.time_ns() // 1_000_000
        ts = ts_ms if ts_ms is not None else now
        mid = msg_id if msg_id is not None else new_message_id(ts, os.urandom)
        return self.driver.send_nowait(Outbound(typ=typ, body=body, msg_id=mid, ts_ms=ts, ttl_ms=ttl_ms,
                                                reply_to=reply_to, to=to, ext=ext))

    def replies(self, msg_id: bytes, typ: int | None = None) -> list[Inbound]:
        return [m for m in self.inbox if m.envelope.reply_to == msg_id
                and (typ is None or m.envelope.typ == typ)]

    def terminals(self, msg_id: bytes) -> list[Inbound]:
        return [m for m in self.replies(msg_id) if m.envelope.typ in TERMINAL]

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        with trio.fail_after(timeout):
            while not predicate():
                if self.terminated is not None:
                    raise AssertionError(f"connection ended: {self.terminated}")
                await self._changed.wait()

    async def terminal(self, msg_id: bytes, timeout: float = 10.0) -> Inbound:
        await self.wait_for(lambda: self.terminals(msg_id), timeout)
        return self.terminals(msg_id)[0]

    async def request(self, typ: int, body: Any, timeout: float = 10.0) -> Inbound:
        env = self.send(typ, body)
        return await self.terminal(env.id, timeout)

    async def invoke(self, body: dict[str, Any], timeout: float = 10.0) -> Inbound:
        return await self.request(INVOKE, body, timeout)


def client_connection(identity: Identity) -> Connection:
    return Connection(role=Role.CLIENT, identity=identity, pipeline=ReceivePipeline(DidKeyResolver()),
                      entropy=os.urandom)


@asynccontextmanager
async def raw_peer_on(stream: trio.abc.Stream, identity: Identity | None = None) -> AsyncIterator[RawPeer]:
    ident = identity or new_identity()
    peer = RawPeer(driver=ConnectionDriver(client_connection(ident), stream), identity=ident)
    peer.driver.on_event = peer.on_event
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer.driver.run)
        with trio.fail_after(10):
            await peer.negotiated.wait()
        assert peer.terminated is None, peer.terminated
        yield peer
        peer.driver.close()
        nursery.cancel_scope.deadline = trio.current_time() + 3


@asynccontextmanager
async def raw_peer(url: str, identity: Identity | None = None) -> AsyncIterator[RawPeer]:
    async with raw_peer_on(await open_stream(parse_url(url)), identity) as peer:
        yield peer


# ------------------------------------------------------ in-process daemon


def demo_catalog() -> tuple[Catalog, ParamsValidator]:
    manifest = demo_manifest()
    return Catalog(manifest.capabilities, cursor_key=os.urandom(32)), ParamsValidator(manifest.schema_store())


@asynccontextmanager
async def demo_daemon(*, policy: Policy = ALLOW_ALL, config: DaemonConfig = DaemonConfig()
                      ) -> AsyncIterator[Daemon]:
    catalog, params = demo_catalog()
    daemon = Daemon(new_identity(), catalog, config=config, policy=policy, params=params)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        yield daemon
        with trio.CancelScope(shield=True):
            await daemon.drain(1.0)
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def memory_peer(daemon: Daemon, identity: Identity | None = None) -> AsyncIterator[RawPeer]:
    """A RawPeer wired to ``daemon`` through an in-memory stream pair."""
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon.serve_stream, server_end)
        async with raw_peer_on(client_end, identity) as peer:
            yield peer
        nursery.cancel_scope.cancel()


# -------------------------------------------------- `ampcap serve` process


@dataclass
class ServeProcess(ProcessHandle):
    proc: subprocess.Popen[str]
    url: str
    did: str
    stderr_path: Path


@contextmanager
def serve_process(tmp: Path, *args: str, verbose: bool = False) -> Iterator[ServeProcess]:
    """``ampcap serve --demo --listen 127.0.0.1:0 ARGS`` with a fresh identity."""
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"), PYTHONUNBUFFERED="1")
    err = tmp / f"serve-{time.monotonic_ns()}.log"
    cmd = [PYTHON, "-m", "ampcap.cli.main", *(["-v"] if verbose else []), "serve", "--demo",
           "--listen", "127.0.0.1:0", *args]
    with open(err, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
    try:
        line = _read_line(proc, 30.0)
        if not line:
            raise AssertionError(f"serve printed no URL line; stderr:\n{err.read_text()}")
        url, did = line.split()
        yield ServeProcess(proc, url, did, err)
    finally:
        stop_process(proc)


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        proc.kill()
        raise AssertionError("serve did not print its URL line in time")
    return proc.stdout.readline().strip()


def soak_scale(small: int, full: int) -> int:
    return full if os.environ.get("AMPCAP_SOAK_SCALE", "small") == "full" else small


# ------------------------------------------------------------ certificates


def self_signed_cert(tmp: Path) -> tuple[Path, Path]:
    """A throwaway certificate and key for localhost and 127.0.0.1 (skips the
    test where no openssl command line is installed)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command line to create a test certificate")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key
