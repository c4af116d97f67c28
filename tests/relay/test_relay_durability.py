"""A relay killed with SIGKILL under load loses nothing it accepted: restarted
on the same store (``--state-dir``, SQLite, or ``--state-url``, PostgreSQL)
it hands every accepted message to its recipient (raw bytes, end to end), at
least once, and each is committed once by the recipient's ACK. Real
processes; the senders are HTTP clients in threads."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from relay_proc import HttpAgent, relay_process  # noqa: E402

from ampcap.wire.identity import Identity


def _send_until(client: HttpAgent, to: str, stop: threading.Event, accepted: list[bytes], tag: int) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        raw = client.message(to, {"sender": tag, "n": n})
        try:
            status = client.post(raw)
        except OSError:
            return  # the relay died under us: that message may or may not have been taken
        if status == 202:
            accepted.append(raw)  # the relay ACK came: it is on disk


def test_sigkill_under_load_loses_no_accepted_message(tmp_path: Path, store_target: str) -> None:
    senders = [Identity.generate(os.urandom) for _ in range(2)]
    bob = Identity.generate(os.urandom)
    accepted: list[bytes] = []
    store_args = ("--state-url", store_target) if store_target.startswith("postgresql://") else \
        ("--state-dir", store_target)
    with relay_process(tmp_path, store_args=store_args) as relay:
        assert relay.http_url is not None
        bob_client = HttpAgent(relay.http_url, relay.did, bob)
        assert bob_client.request("GET", "/amp/v1/messages")[0] == 200  # bob registers
        stop = threading.Event()
        threads = [threading.Thread(target=_send_until, args=(HttpAgent(relay.http_url, relay.did, s), bob.did, stop,
                                                              accepted, i)) for i, s in enumerate(senders)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(accepted) < 40 and time.monotonic() < deadline:
            time.sleep(0.02)
        relay.proc.send_signal(signal.SIGKILL)  # mid-stream: requests are in flight
        relay.proc.wait(10)
        stop.set()
        for t in threads:
            t.join(15)
    assert len(accepted) >= 40
    with relay_process(tmp_path, store_args=store_args, identity=tmp_path / "relay.key") as again:
        assert again.http_url is not None and again.did == relay.did
        bob_client = HttpAgent(again.http_url, again.did, bob)
        first = bob_client.drain()
        assert set(accepted) <= set(first)  # every accepted message, its exact bytes
        assert len(first) == len(set(first))  # one pass hands each once
        assert bob_client.drain() == []  # all committed: a new pass finds nothing
        assert set(again.entries(bob.did)) <= {"delivered"}
        # bob's ACKs wait for their senders (who never poll here): carried like any message.
        assert again.entries(senders[0].did).get("pending", 0) >= 1
        assert again.terminate() == 0
