"""Helpers for the RFC 006 tests: a provider over a fixed set of served ids,
and control requests signed and checked like received ones."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
from exec_helpers import ALICE, BOB, PROVIDER, T0, entropy, message  # noqa: E402,F401

from ampcap.session.control import init_body, op_body  # noqa: E402
from ampcap.session.provider import SessionProvider  # noqa: E402
from ampcap.session.record import ThreadMode  # noqa: E402
from ampcap.wire.registry import MessageType  # noqa: E402

REQUEST, RESPONSE, ERROR = int(MessageType.REQUEST), int(MessageType.RESPONSE), int(MessageType.ERROR)
SID = bytes(range(16))
REVIEW = "org.agentries.code-review:2.1.0"


class Served:
    def __init__(self, *ids: str) -> None:
        self.ids = set(ids)

    def __call__(self, cid: str) -> bool:
        return cid in self.ids


def provider(*ids: str, **kw: Any) -> tuple[SessionProvider, Served]:
    served = Served(*(ids or (REVIEW, "org.ampcap.demo.echo:1.0.0")))
    return SessionProvider(can_serve=served, entropy=entropy, **kw), served


def request(body: Any, sender=ALICE, *, thread: bytes | None = SID, now: int = T0, typ: int = REQUEST):
    return message(sender, typ, body, now, thread_id=thread)


def init(sender=ALICE, sid: bytes = SID, *, mode: ThreadMode | None = None, pin=None, participants=None,
         thread: bytes | None = None, now: int = T0, expires_in_ms: int = 60_000):
    body = init_body(sid, participants or [sender.did], expires_in_ms, thread_mode=mode, pin=pin)
    return request(body, sender, thread=sid if thread is None and mode is not ThreadMode.INDEPENDENT else thread,
                   now=now)


def op(name: str, sender=ALICE, sid: bytes = SID, *, thread: bytes | None = None, now: int = T0, **fields: Any):
    return request(op_body(name, sid, **fields), sender, thread=sid if thread is None else thread, now=now)


def answer(actions: list[Any]):
    sends = [a for a in actions if type(a).__name__ == "Send"]
    assert len(sends) == 1, actions
    return sends[0].out
