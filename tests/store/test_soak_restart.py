"""Soak: kill -9 the daemon at random moments while invokes run, restart it
on the same --state-dir, retry every invoke with the same bytes, and check
exactly once (R8, R19): no token ever runs twice; every invoke ends with one
answer, a success (ran once) or 5002 "interrupted by a restart" (ran at most
once); and an answer given before a kill comes back after it byte for byte.
Sizes: AMPCAP_SOAK_SCALE=small (CI) or full."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import PYTHON, _read_line, soak_scale  # noqa: E402

from ampcap.interop.probe import Probe, ProbeSettings, ReceivedKind  # noqa: E402
from ampcap.net.transport.url import parse_url  # noqa: E402
from ampcap.wire.identity import Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

RESULT = int(MessageType.CAP_RESULT)
SETTINGS = ProbeSettings(timeout_s=10.0, settle_s=0.0, default_ttl_ms=600_000)


def _start(tmp: Path, log: Path) -> tuple[subprocess.Popen[str], str, str]:
    manifest = tmp / "soak.toml"
    if not manifest.exists():
        manifest.write_text(f"""
python_path = ["{Path(__file__).parent / 'soak_caps'}"]

[[capability]]
name = "org.test.soak"
version = "1.0.0"
input_schema = {{ type = "object" }}
output_schema = {{ type = "object" }}
binding = {{ python = "soak_cap:record" }}
""")
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"), AMPCAP_SOAK_LOG=str(log))
    proc = subprocess.Popen([PYTHON, "-m", "ampcap.cli.main", "serve", "--manifest", str(manifest), "--listen",
                             "127.0.0.1:0", "--state-dir", str(tmp / "state")], stdout=subprocess.PIPE,
                            stderr=open(tmp / "serve.log", "a"), text=True, env=env)
    url, did = _read_line(proc, 30.0).split()
    return proc, url, did


async def _send_all(url: str, ident: Identity, wires: dict[bytes, bytes], *, stop_after: float | None
                    ) -> dict[bytes, bytes]:
    """Send every pending invoke on one connection; gather terminal replies (raw)
    until all came, the connection dies, or ``stop_after`` seconds pass."""
    got: dict[bytes, bytes] = {}
    try:
        probe = await Probe.open(parse_url(url), SETTINGS, identity=ident)
    except Exception:
        return got
    try:
        await probe.open_session()
        for wire in wires.values():
            await probe.send_bytes(probe.frame(wire))
        deadline = trio.current_time() + (stop_after if stop_after is not None else 20.0)
        while len(got) < len(wires):
            item = await probe.receive(deadline)
            if item is None or item.kind is ReceivedKind.CLOSED:
                break
            env = item.envelope
            if env is not None and env.typ == RESULT and env.reply_to in wires and env.reply_to not in got:
                got[env.reply_to] = item.raw
    except Exception:
        pass  # the daemon was killed under us
    finally:
        await probe.aclose()
    return got


@pytest.mark.slow
def test_kill_9_under_load_keeps_every_invoke_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    cycles, per_cycle = soak_scale(3, 15), soak_scale(12, 60)
    log = tmp_path / "runs.log"
    ident = Identity.generate(os.urandom)
    first_answers: dict[bytes, bytes] = {}
    all_wires: dict[bytes, bytes] = {}
    tokens: dict[bytes, str] = {}
    proc, url, did = _start(tmp_path, log)
    probe_for_seal = Probe(None, SETTINGS, identity=ident)  # type: ignore[arg-type]  # seals only
    probe_for_seal.peer_did = did
    try:
        for cycle in range(cycles):
            batch: dict[bytes, bytes] = {}
            for n in range(per_cycle):
                token = f"c{cycle}-{n}"
                env, wire = probe_for_seal.seal(MessageType.CAP_INVOKE, {
                    "id": "org.test.soak:1.0.0", "params": {"token": token, "ms": rng.choice([0, 5, 50, 400])}})
                batch[env.id] = wire
                tokens[env.id] = token
            all_wires.update(batch)
            # Send this cycle's invokes and kill the daemon at a random moment meanwhile.
            kill_at = rng.uniform(0.05, 0.6)

            async def load_and_kill() -> dict[bytes, bytes]:
                async with trio.open_nursery() as nursery:
                    result: dict[bytes, bytes] = {}

                    async def send() -> None:
                        result.update(await _send_all(url, ident, batch, stop_after=2.0))

                    nursery.start_soon(send)
                    await trio.sleep(kill_at)
                    proc.send_signal(signal.SIGKILL)
                return result

            answered = trio.run(load_and_kill)
            proc.wait(10)
            for mid, raw in answered.items():
                first_answers.setdefault(mid, raw)
            proc, url, did = _start(tmp_path, log)
        # Final life: no more kills; retry everything (same bytes) until all are answered.
        final: dict[bytes, bytes] = {}
        for _ in range(5):
            pending = {m: w for m, w in all_wires.items() if m not in final}
            if not pending:
                break
            final.update(trio.run(lambda: _send_all(url, ident, pending, stop_after=None)))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert set(final) == set(all_wires), f"{len(all_wires) - len(final)} invokes never answered"
    runs = Counter(log.read_text().split())
    assert max(runs.values(), default=0) <= 1, [t for t, n in runs.items() if n > 1]
    from ampcap.wire.envelope import decode_envelope
    from ampcap.wire.cbor import DEFAULT_LIMITS

    outcomes = Counter()
    for mid, raw in final.items():
        body = decode_envelope(raw, DEFAULT_LIMITS).body
        token = tokens[mid]
        if body["status"] == "success":
            assert runs[token] == 1 and body["result"] == {"token": token}
            outcomes["success"] += 1
        else:
            assert body["error"]["code"] == 5002 and "interrupted by a restart" in body["error"]["message"], body
            assert runs[token] <= 1
            outcomes["interrupted"] += 1
        if mid in first_answers:  # answered before a kill: the very same message after it
            assert raw == first_answers[mid]
    assert outcomes["success"] > 0
    print(f"soak: {len(final)} invokes over {cycles} kills: {dict(outcomes)}; "
          f"{len(first_answers)} answered before a kill, all resent unchanged")
