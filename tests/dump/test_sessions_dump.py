"""``ampcap dump`` and RFC 006: every message names its session (control
messages, session-scoped ones, their replies), ``--by-session`` groups them,
the summary lists the sessions, and the answer to an INPUT_REQUIRED (a
RESPONSE whose reply_to is the question: ampcap's carriage) is named."""

from __future__ import annotations

import os
from pathlib import Path

from ampcap.session.context import session_context
from ampcap.session.control import init_body, op_body
from ampcap.wire.envelope import seal
from ampcap.wire.frames import FrameType, encode_frame
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType as T

T0 = 1_763_800_000_000
SID = bytes(range(16))


def _capture() -> bytes:
    client, provider = Identity.generate(os.urandom), Identity.generate(os.urandom)
    frames: list[bytes] = []

    def send(who: Identity, typ: T, body, *, reply_to: bytes | None = None, thread: bytes | None = SID) -> bytes:
        other = provider if who is client else client
        env, wire = seal(who, typ=int(typ), to=other.did, body=body, now_ms=T0 + len(frames), entropy=os.urandom,
                         reply_to=reply_to, thread_id=thread)
        frames.append(encode_frame(FrameType.AMP_MESSAGE, wire))
        return env.id

    ctx = {"session": session_context(SID)}
    init = send(client, T.REQUEST, init_body(SID, [client.did], 60_000))
    send(provider, T.RESPONSE, {"sess_v": 1, "op": "accept", "session_id": SID, "thread_mode": "coupled",
                                "status": "active", "expires_at": T0 + 60_000}, reply_to=init)
    send(client, T.CAP_INVOKE, {"id": "org.x.other:1.0.0", "params": {}}, thread=None)  # not in the session
    invoke = send(client, T.CAP_INVOKE, {"id": "org.x.ask:1.0.0", "params": {}, **ctx})
    question = send(provider, T.INPUT_REQUIRED, {"prompt": "Ship it?", "options": ["yes", "no"], **ctx},
                    reply_to=invoke)
    send(client, T.RESPONSE, {"answer": "yes", **ctx}, reply_to=question)
    send(provider, T.CAP_RESULT, {"status": "success", "result": {"answer": "yes"}, **ctx}, reply_to=invoke)
    close = send(client, T.REQUEST, op_body("close", SID))
    send(provider, T.RESPONSE, {"sess_v": 1, "op": "close", "session_id": SID, "status": "closed"}, reply_to=close)
    return b"".join(frames)


def test_each_message_names_its_session(tmp_path: Path, dump, jrecords) -> None:
    f = tmp_path / "s.bin"
    f.write_bytes(_capture())
    code, out = dump(["--json", str(f)])
    recs = jrecords(out)
    assert [r["session"] is not None for r in recs] == [True, True, False, True, True, True, True, True, True]
    assert {r["session"] for r in recs if r["session"]} == {SID.hex()}
    assert [r["session_op"] for r in recs] == ["init", "accept", None, None, None, None, None, "close", "close"]
    answer = recs[5]
    assert answer["typ_name"] == "RESPONSE" and answer["input_answer"] is True
    assert answer["answers"]["typ_name"] == "INPUT_REQUIRED"
    assert sum(r["input_answer"] for r in recs) == 1


def test_by_session_groups_and_the_summary_lists_them(tmp_path: Path, dump) -> None:
    f = tmp_path / "s.bin"
    f.write_bytes(_capture())
    code, out = dump(["--by-session", str(f)])
    assert code == 0
    lines = out.splitlines()
    head = lines.index(f"== session {SID.hex()} (8 messages) ==")
    rest = lines.index("== no session (1 frames) ==")
    assert head < rest
    assert any("CAP_INVOKE" in line for line in lines[rest:])
    assert f"   session {SID.hex()}: 8 messages, ops init accept close close, last status closed" in lines
    assert any("answer to INPUT_REQUIRED" in line for line in lines)


def test_by_session_is_refused_with_the_tap(dump) -> None:
    code, _ = dump(["--by-session", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"])
    assert code == 2
