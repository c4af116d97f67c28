"""What ``ampcap invoke`` / ``ampcap query`` print when a peer's replies hold
values JSON has no words for, or text meant to drive a terminal.

The peer is the Python API in a thread; ``ampcap`` runs as a subprocess, as
a user would run it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
import trio

import ampcap
from ampcap.errors import AmpError
from ampcap.wire.identity import Identity

ODD_RESULTS: dict[str, Any] = {
    "bytes_key": {b"\x01": 1, "a": b"\xff"},
    "array_key": {(1, 2): 3},
    "alike_keys": {1: "int", "1": "text"},
    "nan": {"x": math.nan, "y": -math.inf},
    "bignum": 2**70,
    "tag": {"t": cbor2.CBORTag(99, "v")},
}
# A peer's text: an escape sequence that clears the screen, a C1 CSI, a bidi
# override, and a newline that would forge a second line.
HOSTILE = "boom\x1b[2J\x9b31m\u202eevil\nforged line"


def _build_peer() -> ampcap.Peer:
    peer = ampcap.Peer(Identity.generate(os.urandom))

    @peer.capability("org.t.odd", "1.0.0", schema={"type": "object"}, output_schema=False)
    async def odd(what: str) -> object:
        return ODD_RESULTS[what]

    @peer.capability("org.t.hostile", "1.0.0", schema={"type": "object"}, output_schema=False,
                     notes=HOSTILE)
    async def hostile(ctx: ampcap.InvocationContext) -> object:
        await ctx.progress(50, HOSTILE)
        raise AmpError(4001, HOSTILE, details={b"k": 1, "n": math.nan})

    @peer.capability("org.t.long", "1.0.0", schema={"type": "object"}, output_schema=False)
    async def long() -> object:
        raise AmpError(4001, "y" * 5000)

    return peer


@pytest.fixture(scope="module")
def peer_url() -> Iterator[str]:
    url: list[str] = []
    started = threading.Event()
    stop: list[trio.CancelScope] = []
    token: list[trio.lowlevel.TrioToken] = []

    async def serve() -> None:
        with trio.CancelScope() as scope:
            stop.append(scope)
            token.append(trio.lowlevel.current_trio_token())
            async with _build_peer().serve("amp://127.0.0.1:0") as server:
                url.append(server.url)
                started.set()
                await trio.sleep_forever()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert started.wait(20)
    yield url[0]
    token[0].run_sync_soon(stop[0].cancel)
    thread.join(10)


def ampcap_cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"))
    return subprocess.run([sys.executable, "-m", "ampcap.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.mark.parametrize(("what", "shown"), [
    ("bytes_key", {"h'01'": 1, "a": {"$bytes": "ff"}}),
    ("array_key", {"[1, 2]": 3}),
    ("alike_keys", {"1": "int", '"1"': "text"}),
    ("nan", {"x": "NaN", "y": "-Infinity"}),
    ("bignum", 2**70),
    ("tag", {"t": {"$tag": 99, "value": "v"}}),
])
def test_any_result_prints_as_strict_json(peer_url: str, tmp_path: Path, what: str, shown: Any) -> None:
    params = json.dumps({"what": what})
    for extra in ((), ("--json",)):
        out = ampcap_cli(tmp_path, "invoke", peer_url, "org.t.odd:1.0.0", "--params", params, *extra)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
        assert doc == ({"result": shown} if extra else shown)


def test_a_peers_text_cannot_drive_the_terminal(peer_url: str, tmp_path: Path) -> None:
    out = ampcap_cli(tmp_path, "invoke", peer_url, "org.t.hostile:1.0.0")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in out.stderr and raw not in out.stdout
    lines = out.stderr.splitlines()
    assert lines[-1] == "error 4001 BAD_REQUEST: boom\\x1b[2J\\x9b31m\\u202eevil\\nforged line"
    assert any(line.startswith("progress 50% boom\\x1b[2J") for line in lines)
    assert not any(line.startswith("forged line") for line in lines)


def test_error_details_of_any_shape_print_as_json(peer_url: str, tmp_path: Path) -> None:
    out = ampcap_cli(tmp_path, "invoke", peer_url, "org.t.hostile:1.0.0", "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    error = json.loads(out.stdout)["error"]
    assert (error["code"], error["message"]) == (4001, HOSTILE)
    assert error["details"] == {"h'6b'": 1, "n": "NaN"}
    assert out.stdout.isascii()  # --json is ASCII-only: escapes, not raw controls


def test_query_shows_a_peers_notes_escaped(peer_url: str, tmp_path: Path) -> None:
    out = ampcap_cli(tmp_path, "query", peer_url, "org.t.hostile")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["org.t.hostile:1.0.0  (boom\\x1b[2J\\x9b31m\\u202eevil\\nforged line)"]


def test_a_long_message_is_shortened_on_the_terminal_only(peer_url: str, tmp_path: Path) -> None:
    out = ampcap_cli(tmp_path, "invoke", peer_url, "org.t.long:1.0.0", "--json")
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == "error 4001 BAD_REQUEST: " + "y" * 500 + "… (5000 chars)"
    assert json.loads(out.stdout)["error"]["message"] == "y" * 5000
