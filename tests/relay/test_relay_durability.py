"""A relay killed with SIGKILL under load loses nothing it accepted: restarted
on the same --state-dir it hands every accepted message to its recipient
(raw bytes, end to end), at least once, and each is committed once by the
recipient's ACK. Real processes; the senders are HTTP clients in threads."""

from __future__ import annotations

import http.client
import os
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).parent))
from relay_proc import relay_process  # noqa: E402

from ampcap.wire.bearer import mint
from ampcap.wire.cbor import DEFAULT_LIMITS, loads
from ampcap.wire.envelope import decode_envelope, seal
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType


def _now() -> int:
    return time.time_ns() // 1_000_000


class Client:
    def __init__(self, http_url: str, relay_did: str, who: Identity) -> None:
        parts = urlsplit(http_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.relay, self.who = relay_did, who

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            token = mint(self.who, self.relay, now_ms=_now(), entropy=os.urandom)
            conn.request(method, path, body=body or None, headers={"content-type": "application/cbor",
                                                                   "authorization": f"Bearer {token}"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


def _send_until(client: Client, to: str, stop: threading.Event, accepted: list[bytes], tag: int) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        raw = seal(client.who, typ=int(MessageType.MESSAGE), to=to, body={"sender": tag, "n": n}, now_ms=_now(),
                   entropy=os.urandom, ttl=600_000)[1]
        try:
            status, _ = client.request("POST", "/amp/v1/messages", raw)
        except OSError:
            return  # the relay died under us: that message may or may not have been taken
        if status == 202:
            accepted.append(raw)  # the relay ACK came: it is on disk


def _drain(client: Client) -> list[bytes]:
    """Poll every page once (a new pass), acknowledging each message."""
    got: list[bytes] = []
    cursor = ""
    while True:
        status, body = client.request("GET", f"/amp/v1/messages?limit=200{'&cursor=' + cursor if cursor else ''}")
        assert status == 200
        page = loads(body)
        for raw in page["messages"]:
            got.append(raw)
            env = decode_envelope(raw, DEFAULT_LIMITS)
            ack = seal(client.who, typ=int(MessageType.ACK), to=env.sender, reply_to=env.id, now_ms=_now(),
                       entropy=os.urandom, ttl=600_000, body={"ack_source": "recipient", "received_at": _now()})[1]
            assert client.request("POST", "/amp/v1/messages", ack)[0] in (200, 202)
        if not page["has_more"]:
            return got
        cursor = page["next_cursor"]


def test_sigkill_under_load_loses_no_accepted_message(tmp_path: Path) -> None:
    senders = [Identity.generate(os.urandom) for _ in range(2)]
    bob = Identity.generate(os.urandom)
    accepted: list[bytes] = []
    with relay_process(tmp_path) as relay:
        assert relay.http_url is not None
        bob_client = Client(relay.http_url, relay.did, bob)
        assert bob_client.request("GET", "/amp/v1/messages")[0] == 200  # bob registers
        stop = threading.Event()
        threads = [threading.Thread(target=_send_until, args=(Client(relay.http_url, relay.did, s), bob.did, stop,
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
    with relay_process(tmp_path, state_dir=relay.state_dir, identity=tmp_path / "relay.key") as again:
        assert again.http_url is not None and again.did == relay.did
        bob_client = Client(again.http_url, again.did, bob)
        first = _drain(bob_client)
        assert set(accepted) <= set(first)  # every accepted message, its exact bytes
        assert len(first) == len(set(first))  # one pass hands each once
        assert _drain(bob_client) == []  # all committed: a new pass finds nothing
        assert set(again.entries(bob.did)) <= {"delivered"}
        # bob's ACKs wait for their senders (who never poll here): carried like any message.
        assert again.entries(senders[0].did).get("pending", 0) >= 1
        assert again.terminate() == 0
