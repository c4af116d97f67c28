"""What does the relay core cost per message? (issue 32, phase A)

In-process, on the durable queue (SQLite file, WAL, as ``ampcap relay``
will run it), measured against one Ed25519 sign + verify in the same run:

* ingress: ``RelayCore.submit`` of a message for a registered, offline
  recipient (decode, temporal and principal checks, dedupe, quota, the
  queue insert in one transaction), without and with the signed relay ACK;
* poll: one ``poll`` page of 1 message (read by index, marked attempted);
* commit: ``submit`` of the recipient's ACK (its signature verified, the
  entry committed and the record removed, the ACK queued on for the sender);
* disk bytes per queued message (database + WAL after a checkpoint, over N
  messages of the same size, minus the empty database);
* poll latency with ``--rows`` entries of other recipients on disk against
  1,000, to see that a page is read by index (phase B adds the real
  process, the 1,000,000-row run and the daemon comparison).

    python tools/bench_relay.py [--messages 2000] [--rows 200000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

from ampcap.relay import RelayConfig, RelayCore  # noqa: E402
from ampcap.store.database import StateStore  # noqa: E402
from ampcap.store.relay_queue import StoreRelayQueue  # noqa: E402
from ampcap.wire.cbor import DEFAULT_LIMITS  # noqa: E402
from ampcap.wire.envelope import decode_envelope, seal  # noqa: E402
from ampcap.wire.identity import DidKeyResolver, Identity  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402
from ampcap.wire.signing import verify_signature  # noqa: E402

NOW = 1_800_000_000_000
ALICE, BOB, RELAY = (Identity.from_seed(bytes([n]) * 32) for n in (1, 2, 100))


def _relay(directory: Path, **config: object) -> RelayCore:
    queue = StoreRelayQueue(StateStore.open(directory))
    settings = RelayConfig(relay_did=RELAY.did, max_queued_per_recipient=10**9, **config)  # type: ignore[arg-type]
    core = RelayCore(settings, RELAY, queue, DidKeyResolver(), entropy=os.urandom, random=random.Random(1).random)
    core.register(BOB.did, NOW)
    return core


def _messages(n: int, size: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        env, raw = seal(ALICE, typ=int(MessageType.MESSAGE), to=BOB.did, body={"text": "x" * size, "i": i},
                        now_ms=NOW, entropy=os.urandom, ttl=3_600_000)
        out.append((env.id, raw))
    return out


def _ack(msg_id: bytes) -> bytes:
    _, raw = seal(BOB, typ=int(MessageType.ACK), to=ALICE.did, body={"ack_source": "recipient", "received_at": NOW},
                  now_ms=NOW, entropy=os.urandom, ttl=60_000, reply_to=msg_id)
    return raw


def _us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def sign_verify_us(rounds: int) -> float:
    data = b"x" * 200
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        sig = ALICE.sign(data)
        verify_signature(ALICE.public_key, data, sig)
        samples.append(time.perf_counter() - t)
    return _us(samples)


def per_message(tmp: Path, n: int, ack_on_accept: bool) -> dict[str, float]:
    core = _relay(tmp / f"per-message-{ack_on_accept}", ack_on_accept=ack_on_accept)
    messages = _messages(n, 100)
    acks = [_ack(mid) for mid, _ in messages]
    ingress, poll, commit = [], [], []
    for (_, raw), ack in zip(messages, acks):
        t0 = time.perf_counter()
        result = core.submit(raw, principal=ALICE.did, now=NOW)
        t1 = time.perf_counter()
        page = core.poll(BOB.did, None, 1, NOW)
        t2 = time.perf_counter()
        done = core.submit(ack, principal=BOB.did, now=NOW)
        t3 = time.perf_counter()
        assert result.refusal is None and page.messages == (raw,) and done.committed, "relay misbehaved"
        ingress.append(t1 - t0)
        poll.append(t2 - t1)
        commit.append(t3 - t2)
    core.queue.store.close()  # type: ignore[attr-defined]
    return {"ingress": _us(ingress), "poll": _us(poll), "commit": _us(commit)}


def _db_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.name.startswith("state.sqlite3"))


def disk_per_message(tmp: Path, n: int, size: int) -> tuple[float, int]:
    directory = tmp / "disk"
    core = _relay(directory, ack_on_accept=False)
    store = core.queue.store  # type: ignore[attr-defined]
    store.query("PRAGMA wal_checkpoint(TRUNCATE)")
    empty = _db_bytes(directory)
    messages = _messages(n, size)
    for _, raw in messages:
        core.submit(raw, principal=ALICE.did, now=NOW)
    store.query("PRAGMA wal_checkpoint(TRUNCATE)")
    used = _db_bytes(directory) - empty
    store.close()
    return used / n, len(messages[0][1])


def poll_latency(tmp: Path, filler: int, samples: int) -> float:
    """p50 of a 50-message page for BOB with ``filler`` entries of other recipients queued."""
    directory = tmp / f"poll-{filler}"
    core = _relay(directory, ack_on_accept=False)
    store = core.queue.store  # type: ignore[attr-defined]
    # Filler rows through the schema the component created (one transaction;
    # the component itself inserts one message per transaction, too slow to fill a million).
    with store.transaction() as db:
        db.executemany("INSERT INTO relay_record (seq, msg_id, from_did, raw, accepted_at, expires_at, status, "
                       "relay_path, hop_limit) VALUES (?, ?, 'did:x', ?, ?, ?, 'queued', '[]', 8)",
                       ((i, i.to_bytes(16, "big"), b"\xa0" * 300, NOW, NOW + 3_600_000) for i in range(1, filler + 1)))
        db.executemany("INSERT INTO relay_entry (seq, recipient, state) VALUES (?, ?, 'pending')",
                       ((i, f"did:key:other{i % 1000}") for i in range(1, filler + 1)))
        db.execute("UPDATE relay_counter SET n = ? WHERE name = 'seq'", (filler,))
    for _, raw in _messages(100, 100):
        core.submit(raw, principal=ALICE.did, now=NOW)
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        page = core.poll(BOB.did, None, 50, NOW)
        times.append(time.perf_counter() - t)
        assert len(page.messages) == 50
    store.close()
    return _us(times)


# ------------------------------------------------------------ phase B: real processes


def _cpu_s(pid: int) -> float:
    """utime + stime of a process so far (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(cmd: list[str], lines: int = 1) -> tuple[object, list[str]]:
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    return proc, [proc.stdout.readline().strip() for _ in range(lines)]


def processes(tmp: Path, n: int) -> dict[str, float]:
    """sender -> relay -> online agent (push) against a direct invoke of a
    plain daemon, and sender -> relay -> offline recipient (HTTP poll, then
    ACK); CPU of the relay and of the daemon from /proc."""
    import http.client
    import signal
    import subprocess

    import trio

    from ampcap.files.identity import save_identity
    from ampcap.net.api.peer import Peer
    from ampcap.wire.bearer import mint
    from ampcap.wire.cbor import loads

    keys = {}
    for name in ("relay", "agent", "caller", "direct"):
        keys[name] = tmp / f"{name}.key"
        save_identity(Identity.generate(os.urandom), keys[name])
    relay, (amp_line, http_line) = _start(["relay", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--identity",
                                           str(keys["relay"]), "--state-dir", str(tmp / "relay")], 2)
    relay_url, relay_did = amp_line.split()
    relay_http = http_line.split()[0]
    agent, (agent_line,) = _start(["serve", "--demo", "--listen", "127.0.0.1:0", "--identity", str(keys["agent"]),
                                   "--state-dir", str(tmp / "agent"), "--relay", relay_url, "--relay-did", relay_did])
    direct, (direct_line,) = _start(["serve", "--demo", "--listen", "127.0.0.1:0", "--identity", str(keys["direct"]),
                                     "--state-dir", str(tmp / "direct")])
    agent_did, direct_url = agent_line.split()[1], direct_line.split()[0]
    caller = Identity.generate(os.urandom)
    out: dict[str, float] = {}
    try:
        time.sleep(1.0)  # the agent registers at the relay

        async def run(url: str, **kw: object) -> tuple[float, float]:
            async with Peer(caller).connect(url, **kw) as remote:  # type: ignore[arg-type]
                for _ in range(20):  # warm up
                    await remote.invoke("org.ampcap.demo.echo", version="1.0.0", params={"message": "w"})
                lat = []
                start = time.perf_counter()
                for i in range(n):
                    t = time.perf_counter()
                    await remote.invoke("org.ampcap.demo.echo", version="1.0.0", params={"message": f"m{i}"})
                    lat.append(time.perf_counter() - t)
                return n / (time.perf_counter() - start), statistics.median(lat) * 1e3

        d0 = _cpu_s(direct.pid)  # type: ignore[attr-defined]
        out["direct_rate"], out["direct_p50_ms"] = trio.run(run, direct_url)
        out["daemon_cpu_us_per_invoke"] = (_cpu_s(direct.pid) - d0) / n * 1e6  # type: ignore[attr-defined]
        r0 = _cpu_s(relay.pid)  # type: ignore[attr-defined]
        out["push_rate"], out["push_p50_ms"] = trio.run(lambda: run(relay_url, relay_to=agent_did,
                                                                    relay_did=relay_did))
        # Per invoke the relay carries the invoke and the result, and the two recipient ACKs.
        out["relay_cpu_us_per_forward"] = (_cpu_s(relay.pid) - r0) / (2 * n) * 1e6  # type: ignore[attr-defined]

        # Offline recipient: POST n messages, then poll pages of 100 and ACK each.
        host, port = relay_http.removeprefix("http://").rsplit(":", 1)
        bob = Identity.generate(os.urandom)

        def request(who: Identity, method: str, path: str, body: bytes = b"") -> bytes:
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            token = mint(who, relay_did, now_ms=time.time_ns() // 1_000_000, entropy=os.urandom)
            conn.request(method, path, body=body or None, headers={"content-type": "application/cbor",
                                                                   "authorization": f"Bearer {token}"})
            data = conn.getresponse().read()
            conn.close()
            return data

        request(bob, "GET", "/amp/v1/messages")  # registers
        now = time.time_ns() // 1_000_000
        raws = [seal(caller, typ=int(MessageType.MESSAGE), to=bob.did, body={"i": i}, now_ms=now, entropy=os.urandom,
                     ttl=3_600_000) for i in range(n)]
        start = time.perf_counter()
        for _, raw in raws:
            request(caller, "POST", "/amp/v1/messages", raw)
        out["post_rate"] = n / (time.perf_counter() - start)
        polls = []
        start = time.perf_counter()
        taken = 0
        cursor = ""
        while True:
            t = time.perf_counter()
            page = loads(request(bob, "GET", "/amp/v1/messages?limit=100" + (f"&cursor={cursor}" if cursor else "")))
            polls.append(time.perf_counter() - t)
            for raw in page["messages"]:
                env, _ = decode_envelope(raw, DEFAULT_LIMITS), None
                _, ack = seal(bob, typ=int(MessageType.ACK), to=caller.did, reply_to=env.id, ttl=3_600_000,
                              now_ms=time.time_ns() // 1_000_000, entropy=os.urandom,
                              body={"ack_source": "recipient", "received_at": 1})
                request(bob, "POST", "/amp/v1/messages", ack)
                taken += 1
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
        out["poll_ack_rate"] = taken / (time.perf_counter() - start)
        out["poll_page_p50_ms"] = statistics.median(polls) * 1e3
        out["polled"] = taken
    finally:
        for proc in (agent, direct, relay):
            proc.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
            try:
                proc.wait(10)  # type: ignore[attr-defined]
            except subprocess.TimeoutExpired:
                proc.kill()  # type: ignore[attr-defined]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=200_000, help="queued entries for the poll-latency run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--process", type=int, default=0, metavar="N",
                        help="also run the real processes (ampcap relay, serve --relay, a plain serve) with N "
                             "invokes each way and N polled messages")
    args = parser.parse_args()
    if args.process:
        ptmp = Path(tempfile.mkdtemp(prefix="bench-relay-proc-"))
        try:
            res = processes(ptmp, args.process)
        finally:
            shutil.rmtree(ptmp, ignore_errors=True)
        print(f"direct invoke:        {res['direct_rate']:7.0f}/s, p50 {res['direct_p50_ms']:6.2f} ms; daemon CPU "
              f"{res['daemon_cpu_us_per_invoke']:7.0f} us per invoke")
        print(f"through relay (push): {res['push_rate']:7.0f}/s, p50 {res['push_p50_ms']:6.2f} ms; relay CPU "
              f"{res['relay_cpu_us_per_forward']:7.0f} us per forwarded message "
              f"({res['relay_cpu_us_per_forward'] / res['daemon_cpu_us_per_invoke']:4.2f}x the daemon's per invoke)")
        print(f"offline recipient:    POST {res['post_rate']:7.0f}/s; poll+ACK {res['poll_ack_rate']:7.0f}/s "
              f"({res['polled']:.0f} messages), poll page of 100 p50 {res['poll_page_p50_ms']:6.2f} ms")
    n, rows = (50, 5_000) if args.quick else (args.messages, args.rows)
    tmp = Path(tempfile.mkdtemp(prefix="bench-relay-"))
    try:
        ref = sign_verify_us(max(n, 200))
        plain = per_message(tmp, n, ack_on_accept=False)
        acked = per_message(tmp, n, ack_on_accept=True)
        per_msg, raw_size = disk_per_message(tmp, n, 100)
        small = poll_latency(tmp, 1_000, 200)
        large = poll_latency(tmp, rows, 200)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"Ed25519 sign+verify (reference): {ref:8.1f} us")
    for name, res in (("no relay ACK", plain), ("with relay ACK", acked)):
        total = res["ingress"] + res["commit"]
        print(f"{name:>15}: ingress {res['ingress']:7.1f} us, poll(1) {res['poll']:7.1f} us, "
              f"commit {res['commit']:7.1f} us; ingress+commit = {total:7.1f} us = {total / ref:4.1f}x sign+verify")
    print(f"disk per queued message: {per_msg:7.0f} bytes (raw AMP message {raw_size} bytes)")
    print(f"poll p50 (50 of 100 for one recipient): {small:7.1f} us with 1,000 other entries, "
          f"{large:7.1f} us with {rows:,} ({large / small:4.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
