"""Request/reply correlation and the summary's percentiles."""

from __future__ import annotations

from ampcap.dump.correlate import Correlator
from ampcap.dump.records import Record
from ampcap.dump.render import Summary, percentile
from ampcap.wire.frames import FrameType
from ampcap.wire.registry import MessageType

INV, RES, ERR, ACK = (int(MessageType.CAP_INVOKE), int(MessageType.CAP_RESULT), int(MessageType.ERROR),
                      int(MessageType.ACK))


def rec(i: int, typ: int, ident: int, reply_to: int | None = None, at: float | None = None,
        ts: int = 0) -> Record:
    return Record(index=i, frame_type=FrameType.AMP_MESSAGE, raw=b"", typ=typ, id=ident.to_bytes(16, "big"),
                  reply_to=reply_to.to_bytes(16, "big") if reply_to is not None else None, at=at, ts=ts)


def test_reply_names_request_and_latency() -> None:
    c = Correlator()
    inv, res = rec(0, INV, 1, at=10.0), rec(1, RES, 2, reply_to=1, at=10.25)
    c.add(inv)
    c.add(res)
    assert res.answers == ((1).to_bytes(16, "big").hex(), "CAP_INVOKE")
    assert res.latency_ms == 250.0
    assert c.finish() == [] and inv.flags == []
    assert c.invoke_latency(res) == (250.0, False)
    c.mark_shown(inv)
    assert c.invoke_latency(res) == (250.0, True) and c.invoke_latency(inv) is None


def test_latency_falls_back_to_envelope_ts() -> None:
    c = Correlator()
    c.add(rec(0, INV, 1, ts=1000))
    r = rec(1, ERR, 2, reply_to=1, ts=1042)
    c.add(r)
    assert r.latency_ms == 42.0


def test_non_terminal_reply_does_not_close_invoke() -> None:
    c = Correlator()
    inv = rec(0, INV, 1)
    c.add(inv)
    c.add(rec(1, ACK, 2, reply_to=1))
    assert c.finish() == [inv] and "no terminal reply" in inv.flags[0]


def test_second_terminal_and_unseen_reply() -> None:
    c = Correlator()
    c.add(rec(0, INV, 1))
    c.add(rec(1, RES, 2, reply_to=1))
    second = rec(2, RES, 3, reply_to=1)
    c.add(second)
    assert "second terminal reply" in second.flags[0]
    stray = rec(3, RES, 4, reply_to=99)
    c.add(stray)
    assert stray.answers is None and stray.flags == [] and "unseen" in stray.notes[0]


def test_tracking_is_bounded() -> None:
    c = Correlator(max_tracked=10)
    for i in range(100):
        c.add(rec(i, ACK, i + 1))
    late = rec(100, ACK, 1000, reply_to=1)
    c.add(late)
    assert late.answers is None


def test_percentiles_and_summary() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99)) == (50.0, 90.0, 99.0)
    assert percentile([7.0], 99) == 7.0
    s = Summary()
    r = rec(0, INV, 1)
    r.flags.append("x")
    s.add(r)
    s.invoke_latencies_ms.append(5.0)
    s.open_invokes = 1
    text = s.render()
    assert "CAP_INVOKE 1" in text and "correlation flags: 1" in text and "p50 5" in text


def test_remembered_requests_are_bounded_by_bytes_too() -> None:
    c = Correlator(max_tracked=1000, max_bytes=1000)
    first = rec(0, INV, 1)
    first.raw = b"x" * 600
    c.add(first)
    second = rec(1, INV, 2)
    second.raw = b"y" * 600
    c.add(second)  # 1,200 bytes: the oldest is forgotten
    late = rec(2, RES, 3, reply_to=1)
    c.add(late)
    assert late.answers is None and "unseen" in late.notes[0]
    assert c.finish() == [second]


def test_the_summary_counts_at_most_64_kinds_of_message() -> None:
    s = Summary()
    for typ in range(1000, 1100):  # unknown type numbers, the sender's to choose
        s.add(rec(typ, typ, typ))
    assert len(s.by_type) == 65 and s.by_type["other"] == 36 and s.records == 100
