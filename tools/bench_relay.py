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
from ampcap.wire.envelope import seal  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=200_000, help="queued entries for the poll-latency run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    args = parser.parse_args()
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
