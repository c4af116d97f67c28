"""Fuzz targets for the RFC 003 relay's wire inputs (registered in
``targets.py``): a fresh in-memory relay core per input, and the first byte
says what the rest is:

* 0: a relay-forward wrapper POSTed by a trusted upstream relay;
* 1: a relay-commit-report POSTed by a trusted downstream relay;
* 2: a poll cursor (text) from a registered consumer;
* 3: any message submitted by a registered principal;
* 4: a captured HTTP body read by the dump (webhook, wrappers, answers,
  receipts).

What may happen: the federation calls answer with a body (never raise), a
poll raises only ``AmpError`` 1001, ``submit`` never raises (a refusal is
its result), the dump reader returns or says None.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any

from ampcap.dump.relaywire import read_relay_body
from ampcap.errors import AmpError
from ampcap.relay import RelayConfig, RelayCore, parse_routes
from ampcap.relay.federation import (ForwardAnswer, ForwardRequest, encode_commit_report, encode_forward,
                                     encode_forward_answer)
from ampcap.relay.webhook import build_webhook
from ampcap.store.database import StateStore
from ampcap.store.relay_queue import StoreRelayQueue
from ampcap.wire.envelope import seal
from ampcap.wire.identity import DidKeyResolver, Identity
from ampcap.wire.registry import MessageType

NOW = int(time.time() * 1000)
RELAY, PEER, ALICE, BOB = (Identity.from_seed(bytes([n]) * 32) for n in (31, 32, 33, 34))


def _core() -> RelayCore:
    routes = parse_routes({"peer": [{"did": PEER.did, "url": "http://127.0.0.1:9", "trusted": True,
                                     "transfer_modes": ["single", "dual"]}]})
    core = RelayCore(RelayConfig(relay_did=RELAY.did), RELAY, StoreRelayQueue(StateStore.open(None)), DidKeyResolver(),
                     entropy=os.urandom, random=random.Random(0).random, routes=routes)
    core.register(BOB.did, NOW)
    return core


def relay_wire(data: bytes) -> None:
    if not data:
        return
    kind, body = data[0] % 5, data[1:]
    if kind == 4:
        read_relay_body(body, {"x-amp-relay": RELAY.did, "x-amp-timestamp": str(NOW // 1000),
                               "x-amp-signature": "AA"}, max_size=1 << 20, now_ms=NOW)
        return
    core = _core()
    if kind == 0:
        answer, _ = core.receive_forward(body, principal=PEER.did, now=NOW)
        assert isinstance(answer, bytes) and answer
    elif kind == 1:
        answer, _ = core.receive_commit_report(body, principal=PEER.did, now=NOW)
        assert isinstance(answer, bytes) and answer
    elif kind == 2:
        try:
            core.poll(BOB.did, body.decode("utf-8", "replace"), 10, NOW)
        except AmpError as exc:
            assert exc.code == 1001, exc
    else:
        core.submit(body, principal=ALICE.did, now=NOW)


def _message(typ: int = int(MessageType.MESSAGE), **kw: Any) -> bytes:
    return seal(ALICE, typ=typ, to=BOB.did, body={"text": "hi"}, now_ms=NOW, entropy=lambda n: bytes(n), **kw)[1]


def _seeds_relay_wire() -> Iterator[bytes]:
    raw = _message()
    wrapper = encode_forward(ForwardRequest(message=raw, from_did=ALICE.did, recipient_did=BOB.did,
                                            relay_path=(PEER.did,), hop_limit=3, upstream_relay=PEER.did,
                                            transfer_mode="single"))
    yield b"\x00" + wrapper
    yield b"\x01" + encode_commit_report(b"\xd2\x84\x43\xa1\x01\x27\xa0\x41\xa0\x40")
    yield b"\x02" + b"1-5"
    yield b"\x02"
    yield b"\x03" + raw
    yield b"\x03" + _message(int(MessageType.ACK), reply_to=b"\x01" * 16)
    yield b"\x04" + build_webhook(RELAY, raw, NOW)[1]
    yield b"\x04" + wrapper
    yield b"\x04" + encode_forward_answer(ForwardAnswer(accepted=False, error_code=2003, error_message="loop"))


def relay_targets(target: Any) -> dict[str, Any]:
    return {"relay_wire": target(relay_wire, _seeds_relay_wire, max_len=4096)}
