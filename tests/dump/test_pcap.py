"""pcap/pcapng input: TCP reassembly (retransmission, overlap, out-of-order),
correlation of invokes and replies, filters and the summary (issue 6).

The captures are written by the test itself with dpkt: real signed AMP
messages, framed per RFC 002, cut into TCP segments and wrapped in
Ethernet/IPv4/TCP headers with consistent sequence numbers.
"""

from __future__ import annotations

import itertools
import socket
from pathlib import Path
from typing import Any

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ampcap.dump.pcap import TcpReassembler
from ampcap.errors import AmpError
from ampcap.wire.envelope import seal
from ampcap.wire.frames import FrameType, encode_frame
from ampcap.wire.identity import Identity
from ampcap.wire.registry import MessageType
from ampcap.wire.transport import HandshakeRequest, HandshakeResponse

CLIENT = Identity.from_seed(b"\x21" * 32)
SERVER = Identity.from_seed(b"\x22" * 32)
T0 = 1_795_000_000_000
C_EP, S_EP = ("10.0.0.1", 40000), ("10.0.0.2", 7400)


def _entropy() -> Any:
    c = itertools.count(1)
    return lambda n: next(c).to_bytes(n, "big")


ENTROPY = _entropy()


def msg(sender: Identity, to: Identity, typ: MessageType, body: Any, at_ms: int,
        reply_to: bytes | None = None) -> tuple[bytes, bytes]:
    env, raw = seal(sender, typ=int(typ), to=to.did, body=body, now_ms=at_ms, entropy=ENTROPY,
                    reply_to=reply_to)
    return env.id, encode_frame(FrameType.AMP_MESSAGE, raw)


class TcpWriter:
    """Builds one TCP connection's packets with real sequence numbers."""

    def __init__(self) -> None:
        self.seq = {C_EP: 1000, S_EP: 900_000}
        self.packets: list[tuple[float, bytes]] = []

    def packet(self, t: float, src: tuple[str, int], data: bytes = b"", flags: int = dpkt.tcp.TH_ACK,
               seq: int | None = None) -> None:
        dst = S_EP if src == C_EP else C_EP
        tcp = dpkt.tcp.TCP(sport=src[1], dport=dst[1], seq=self.seq[src] if seq is None else seq,
                           ack=self.seq[dst], flags=flags, data=data)
        ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(dst[0]), p=dpkt.ip.IP_PROTO_TCP,
                        data=tcp)
        ip.len = len(ip)
        eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
        self.packets.append((t, bytes(eth)))

    def send(self, t: float, src: tuple[str, int], data: bytes) -> int:
        start = self.seq[src]
        self.packet(t, src, data)
        self.seq[src] = (start + len(data)) & 0xFFFFFFFF
        return start

    def handshake(self, t: float) -> None:
        self.packet(t, C_EP, flags=dpkt.tcp.TH_SYN)
        self.seq[C_EP] += 1
        self.packet(t, S_EP, flags=dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
        self.seq[S_EP] += 1
        self.packet(t, C_EP)


def build_session() -> tuple[TcpWriter, dict[str, bytes]]:
    """A session with: a handshake, an answered invoke (CAP_RESULT sent as a
    retransmitted segment and an out-of-order pair), an invoke answered twice,
    and an invoke never answered."""
    w = TcpWriter()
    ids: dict[str, bytes] = {}
    t = T0 / 1000
    w.handshake(t)
    w.send(t + 0.001, C_EP, encode_frame(FrameType.HANDSHAKE, HandshakeRequest(max_msg_size=1 << 24).to_payload()))
    w.send(t + 0.002, S_EP, encode_frame(FrameType.HANDSHAKE,
                                         HandshakeResponse(accepted=True, max_msg_size=1 << 24).to_payload()))
    # 1. invoke, split over three segments; the middle one is retransmitted.
    ids["inv1"], f = msg(CLIENT, SERVER, MessageType.CAP_INVOKE,
                         {"capability": "org.ampcap.demo.echo", "version": "1.0.0", "params": {"message": "x" * 50}},
                         T0 + 10)
    a, b = len(f) // 3, 2 * len(f) // 3
    w.send(t + 0.010, C_EP, f[:a])
    mid_seq = w.send(t + 0.011, C_EP, f[a:b])
    w.packet(t + 0.012, C_EP, f[a:b], seq=mid_seq)  # retransmission
    w.send(t + 0.013, C_EP, f[b:])
    # 2. the result, its two halves captured out of order, plus an overlap.
    ids["res1"], f = msg(SERVER, CLIENT, MessageType.CAP_RESULT, {"status": "success", "result": {"message": "x"}},
                         T0 + 40, reply_to=ids["inv1"])
    half = len(f) // 2
    first_seq = w.seq[S_EP]
    w.seq[S_EP] = (first_seq + half) & 0xFFFFFFFF
    w.packet(t + 0.040, S_EP, f[half:])  # second half first
    w.packet(t + 0.041, S_EP, f[:half + 5], seq=first_seq)  # overlaps the held segment by 5 bytes
    w.seq[S_EP] = (first_seq + len(f)) & 0xFFFFFFFF
    # 3. an invoke answered twice (CAP_RESULT, then ERROR).
    ids["inv2"], f = msg(CLIENT, SERVER, MessageType.CAP_INVOKE,
                         {"capability": "org.ampcap.demo.math.add", "version": "1.0.0", "params": {"a": 1, "b": 2}},
                         T0 + 100)
    w.send(t + 0.100, C_EP, f)
    ids["res2"], f1 = msg(SERVER, CLIENT, MessageType.CAP_RESULT, {"status": "success", "result": {"sum": 3}},
                          T0 + 120, reply_to=ids["inv2"])
    ids["err2"], f2 = msg(SERVER, CLIENT, MessageType.ERROR, {"code": 5001, "category": "internal", "message": "late"},
                          T0 + 130, reply_to=ids["inv2"])
    w.send(t + 0.130, S_EP, f1 + f2)  # two frames in one segment
    # 4. an invoke that never gets a reply.
    ids["inv3"], f = msg(CLIENT, SERVER, MessageType.CAP_INVOKE,
                         {"capability": "org.ampcap.demo.sleep", "version": "1.0.0", "params": {"ms": 10}},
                         T0 + 200)
    w.send(t + 0.200, C_EP, f)
    w.packet(t + 0.300, C_EP, flags=dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
    return w, ids


def write_capture(path: Path, w: TcpWriter, fmt: str) -> None:
    with path.open("wb") as fp:
        writer = dpkt.pcapng.Writer(fp) if fmt == "pcapng" else dpkt.pcap.Writer(fp)
        for ts, buf in w.packets:
            writer.writepkt(buf, ts=ts)


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_capture_is_reassembled_and_correlated(tmp_path: Path, dump, jrecords, fmt: str) -> None:
    w, ids = build_session()
    path = tmp_path / f"session.{fmt}"
    write_capture(path, w, fmt)
    code, out = dump(["--json", str(path)])
    assert code == 0
    recs = jrecords(out)
    assert [r["typ_name"] or r["frame_type"] for r in recs] == [
        "HANDSHAKE", "HANDSHAKE", "CAP_INVOKE", "CAP_RESULT", "CAP_INVOKE", "CAP_RESULT", "ERROR", "CAP_INVOKE"]
    by_id = {r["id"]: r for r in recs if r["id"]}
    for r in recs:
        assert r["errors"] == [], r
        if r["id"]:
            assert r["signature"] == "valid" and r["expiry"] == "valid"
    assert recs[0]["direction"] == "c2s" and recs[0]["src"] == "10.0.0.1:40000" and recs[0]["dst"] == "10.0.0.2:7400"
    assert recs[1]["direction"] == "s2c"
    assert recs[1]["control"]["accepted"] is True
    res1 = by_id[ids["res1"].hex()]
    assert res1["answers"] == {"id": ids["inv1"].hex(), "typ_name": "CAP_INVOKE"}
    assert res1["latency_ms"] == pytest.approx(28.0, abs=0.01)  # capture time of 41 ms − 13 ms
    assert by_id[ids["res2"].hex()]["flags"] == []
    assert "second terminal reply" in by_id[ids["err2"].hex()]["flags"][0]
    assert "no terminal reply" in by_id[ids["inv3"].hex()]["flags"][0]
    assert by_id[ids["inv1"].hex()]["flags"] == [] and by_id[ids["inv2"].hex()]["flags"] == []
    assert by_id[ids["inv1"].hex()]["body"]["params"]["message"] == "x" * 50
    # --strict: the flags count as findings.
    assert dump(["--json", "--strict", str(path)])[0] == 1


def test_text_summary_and_filters(tmp_path: Path, dump) -> None:
    w, ids = build_session()
    path = tmp_path / "s.pcap"
    write_capture(path, w, "pcap")
    code, out = dump(["--color", "never", str(path)])
    assert code == 0
    assert "c2s 10.0.0.1:40000→10.0.0.2:7400" in out
    assert "answers CAP_INVOKE" in out
    assert "types:  CAP_INVOKE 3, CAP_RESULT 2, ERROR 1, HANDSHAKE 2" in out
    assert "invoke latency ms (n=2): p50 28 " in out and "p99 30" in out
    assert "1 invoke(s) without a terminal reply" in out
    _, only = dump(["--json", "--type", "cap_result", str(path)])
    assert only.count("\n") == 2 and '"typ_name":"CAP_RESULT"' in only
    _, only = dump(["--json", "--type", "0x0f", str(path)])
    assert only.count("\n") == 1
    _, cap = dump(["--json", "--capability", "org.ampcap.demo.math.add", str(path)])
    lines = cap.splitlines()
    assert len(lines) == 3  # the invoke and both replies that answer it
    _, did = dump(["--json", "--did", SERVER.did, "--type", "CAP_INVOKE", str(path)])
    assert did.count("\n") == 3
    _, none = dump(["--json", "--port", "9999", str(path)])
    assert none == ""
    # The summary describes what was shown: latencies of the invokes shown
    # (or whose terminal reply was), open invokes only if they pass.
    def summary(*argv: str) -> str:
        text = dump(["--color", "never", *argv, str(path)])[1]
        return text[text.index("-- summary"):]

    shown = summary("--type", "CAP_INVOKE")
    assert "invoke latency ms (n=2)" in shown and "1 invoke(s) without" in shown
    shown = summary("--type", "CAP_RESULT")
    assert "invoke latency ms (n=2)" in shown and "without a terminal reply" not in shown
    shown = summary("--capability", "org.ampcap.demo.math.add")
    assert "invoke latency ms (n=1): p50 30 " in shown and "without a terminal reply" not in shown
    shown = summary("--type", "HANDSHAKE")
    assert "latency" not in shown and "without a terminal reply" not in shown


def test_missing_segment_is_reported(tmp_path: Path, dump, jrecords) -> None:
    w = TcpWriter()
    t = T0 / 1000
    w.handshake(t)
    _, f = msg(CLIENT, SERVER, MessageType.PING, None, T0)
    w.seq[C_EP] += 10  # ten bytes never captured
    w.send(t, C_EP, f)
    path = tmp_path / "gap.pcap"
    write_capture(path, w, "pcap")
    code, out = dump(["--json", str(path)])
    recs = jrecords(out)
    assert code == 0 and len(recs) == 1
    assert recs[0]["errors"][0]["path"] == "tcp" and "gap" in recs[0]["errors"][0]["message"]


def test_not_a_capture(tmp_path: Path, dump) -> None:
    bad = tmp_path / "bad.pcapng"
    bad.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\x1c\x00\x00\x00" + b"\x00" * 20)  # no byte-order mark
    with pytest.raises(AmpError, match="not a readable pcap/pcapng file: .*unknown byte-order mark"):
        dump([str(bad)])


def _boundaries(raw: bytes, fmt: str) -> list[int]:
    """Where each record (pcap) or block (pcapng) ends, the file header first."""
    if fmt == "pcap":
        ends, at = [24], 24
        while at < len(raw):
            at += 16 + int.from_bytes(raw[at + 8:at + 12], "little")
            ends.append(at)
        return ends
    ends, at = [], 0
    while at < len(raw):
        at += int.from_bytes(raw[at + 4:at + 8], "little")
        ends.append(at)
    return ends


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_cut_capture_is_handled_alike_wherever_the_cut_falls(tmp_path: Path, dump, jrecords, fmt: str) -> None:
    """Inside the file header, a record's header or a record's data, before
    or after the first packet: the packets before the cut are shown as if
    the file ended at the last whole record, plus one finding that says
    where the cut fell; exit 0 (1 with --strict), never a 'not a capture'
    failure. (A cut inside the first record was exit 1, one inside a
    record header spoke dpkt's words: 'got 6, 16 needed at least'.)"""
    w, _ = build_session()
    path = tmp_path / f"s.{fmt}"
    write_capture(path, w, fmt)
    whole = path.read_bytes()
    ends = _boundaries(whole, fmt)
    assert ends[-1] == len(whole)
    headers = 1 if fmt == "pcap" else 2  # pcapng: the section header and the interface block
    cuts = {4, 10} | {end + d for end in ends[:-1] for d in (1, 6, 30)}
    for cut in sorted(c for c in cuts if c < len(whole)):
        path.write_bytes(whole[:cut])
        code, out = dump(["--json", str(path)])
        assert code == 0, cut
        recs = jrecords(out)
        found = [e for r in recs for e in r["errors"] if e.get("path") == "capture"]
        complete = max([end for end in ends if end <= cut], default=0)
        packets = max(0, sum(1 for end in ends if end <= cut) - headers)
        assert len(found) == 1, (cut, found)
        message = found[0]["message"]
        assert found[0]["code"] == 1001
        assert message.startswith(f"the capture is cut short after {packets} packet"), (cut, message)
        assert f"the file ends at byte {cut}, inside " in message, message
        if cut <= (24 if fmt == "pcap" else 0):
            assert "inside its file header" in message or "inside the header of block 1" in message
        elif cut - complete < (16 if fmt == "pcap" else 8):
            assert "inside the header of " in message, message
        assert "needed at least" not in message
        # What came before the cut is all shown: the same records as a file
        # that ends at the last whole record.
        path.write_bytes(whole[:complete])
        if complete >= ends[headers - 1]:
            _, before = dump(["--json", str(path)])
            def unnumbered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
                return [{k: v for k, v in r.items() if k != "index"} for r in records
                        if not any(e.get("path") == "capture" for e in r["errors"])]

            assert unnumbered(recs) == unnumbered(jrecords(before)), cut
        path.write_bytes(whole[:cut])
        assert dump(["--json", "--strict", str(path)])[0] == 1


def test_a_damaged_record_length_is_not_taken_for_a_cut(tmp_path: Path, dump, jrecords) -> None:
    w, _ = build_session()
    path = tmp_path / "s.pcap"
    write_capture(path, w, "pcap")
    damaged = bytearray(path.read_bytes())
    damaged[24 + 8:24 + 12] = (1 << 31).to_bytes(4, "little")  # the first record's captured length
    path.write_bytes(bytes(damaged))
    with pytest.raises(AmpError, match="record 1 declares 2147483648 captured bytes"):
        dump([str(path)])


def test_an_unsupported_link_type_is_named_not_an_empty_capture(tmp_path: Path, dump) -> None:
    path = tmp_path / "odd.pcap"
    with path.open("wb") as fp:
        dpkt.pcap.Writer(fp, linktype=147).writepkt(b"\x00" * 40, ts=1.0)  # DLT_USER0
    from ampcap.errors import AmpError

    with pytest.raises(AmpError, match="link type 147 is not supported"):
        dump([str(path)])


def test_reassembler_wraps_around_sequence_space() -> None:
    r = TcpReassembler()
    r.syn(0xFFFFFFF0)
    assert r.segment(0xFFFFFFF1, b"a" * 10) == b"a" * 10
    assert r.segment(0xFFFFFFFB + 10, b"c" * 5) == b""  # early
    assert r.segment(0xFFFFFFFB, b"b" * 10) == b"b" * 10 + b"c" * 5
    assert r.segment(0xFFFFFFF1, b"a" * 10) == b""  # old retransmission
    assert r.gap() is None


def test_capture_from_stdin(tmp_path: Path, dump, jrecords) -> None:
    w, _ = build_session()
    path = tmp_path / "s.pcap"
    write_capture(path, w, "pcap")
    code, out = dump(["--json", "-"], stdin=path.read_bytes())
    assert code == 0 and len(jrecords(out)) == 8


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_damaged_captures_never_crash(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    import io

    from ampcap.dump.pcap import read_capture
    from ampcap.errors import AmpError
    from ampcap.wire.frames import Framing

    w, _ = build_session()
    path = tmp_path_factory.mktemp("cap") / "s.pcapng"
    write_capture(path, w, data.draw(st.sampled_from(["pcap", "pcapng"])))
    raw = bytearray(path.read_bytes())
    cut = data.draw(st.integers(0, len(raw)))
    for pos in data.draw(st.lists(st.integers(0, len(raw) - 1), max_size=5)):
        raw[pos] ^= 0xFF
    try:
        events = list(read_capture(io.BytesIO(bytes(raw[:cut])), framing=Framing.RFC002, max_size=1 << 20))
    except AmpError as exc:
        assert exc.code == 1001
    else:
        assert all(e.frame is not None or e.error is not None for e in events)


def test_reused_ports_start_a_new_connection(tmp_path: Path, dump, jrecords) -> None:
    packets = []
    for round_ in range(2):
        w = TcpWriter()
        w.seq[C_EP] += round_ * 7777  # a fresh initial sequence number
        w.handshake(T0 / 1000 + round_)
        w.packet(T0 / 1000 + round_, C_EP, flags=dpkt.tcp.TH_SYN, seq=w.seq[C_EP] - 1)  # retransmitted SYN
        _, f = msg(CLIENT, SERVER, MessageType.PING, None, T0 + round_ * 1000)
        w.send(T0 / 1000 + round_, C_EP, f)
        packets += w.packets
    w.packets = packets
    path = tmp_path / "reuse.pcap"
    write_capture(path, w, "pcap")
    code, out = dump(["--json", str(path)])
    recs = jrecords(out)
    assert [r["typ_name"] for r in recs] == ["PING", "PING"] and all(r["errors"] == [] for r in recs)


def test_packet_that_trips_dpkt_is_skipped(tmp_path: Path, dump) -> None:
    # Found by fuzzing: dpkt raises AttributeError (not its own Error) on this
    # IPv6 extension header chain; the packet is skipped, the dump goes on.
    packet = bytes.fromhex("2c" * 68 + "0000d4c300a1f20200d4c3" + "00" * 17 + "a102000400000000000000000000d4c3")
    path = tmp_path / "raw.pcap"
    with path.open("wb") as fp:
        writer = dpkt.pcap.Writer(fp, linktype=dpkt.pcap.DLT_RAW)
        writer.writepkt(packet, ts=1.0)
    code, out = dump(["--json", str(path)])
    assert code == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.data())
def test_reassembly_of_any_segmentation_gives_the_stream(stream: bytes, data: st.DataObject) -> None:
    # Segments of any sizes, overlapping, duplicated, in any order: once all
    # of them arrived, exactly the stream came out, in order, with no gap.
    isn = data.draw(st.integers(0, 0xFFFFFFFF))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=12))) if len(stream) > 1 else []
    bounds = [0, *cuts, len(stream)]
    segments = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    extra = data.draw(st.lists(st.tuples(st.integers(0, len(stream) - 1), st.integers(1, 40)), max_size=6))
    segments += [(a, min(len(stream), a + n)) for a, n in extra]  # overlaps and duplicates
    order = data.draw(st.permutations(segments))
    r = TcpReassembler()
    r.syn(isn)
    out = b"".join(r.segment((isn + 1 + a) & 0xFFFFFFFF, stream[a:b]) for a, b in order)
    assert out == stream and r.gap() is None and r.pending_bytes == 0


def test_a_gap_filled_last_releases_many_held_segments_at_once() -> None:
    # 20,000 one-byte segments held in reverse order, then the missing first
    # byte: every held segment was rescanned after each release before
    # (quadratic: about a minute here; a small crafted capture, hours).
    import time

    r = TcpReassembler()
    r.syn(0)
    n = 20_000
    for seq in range(n, 1, -1):
        assert r.segment(seq, bytes([seq % 251])) == b""
    started = time.perf_counter()
    out = r.segment(1, b"\x01")
    assert time.perf_counter() - started < 5  # a hang guard, not a speed target
    assert out == b"\x01" + bytes(seq % 251 for seq in range(2, n + 1)) and r.gap() is None


def _ended_connection(port: int, t: float, *, fin_first: bool = False,
                      torn: bool = False) -> list[tuple[float, bytes]]:
    """A connection with one ping each way, then FIN both ways; with
    ``fin_first`` the client's FIN is captured before its ping, with ``torn``
    the client's ping is cut short."""
    w = TcpWriter()
    w.seq = {C_EP: 1000, S_EP: 900_000}
    w.handshake(t)
    _, ping = msg(CLIENT, SERVER, MessageType.PING, None, T0)
    said = ping[:9] if torn else ping
    if fin_first:
        w.packet(t + 0.002, C_EP, flags=dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK, seq=w.seq[C_EP] + len(said))
        w.send(t + 0.001, C_EP, said)
    else:
        w.send(t + 0.001, C_EP, said)
        w.packet(t + 0.002, C_EP, flags=dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
    w.seq[C_EP] += 1
    w.send(t + 0.003, S_EP, ping)
    w.packet(t + 0.004, S_EP, flags=dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
    w.packet(t + 0.005, S_EP, flags=dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK, seq=w.seq[S_EP])  # retransmitted FIN
    return [(ts, _with_client_port(buf, port)) for ts, buf in w.packets]


def _with_client_port(frame: bytes, port: int) -> bytes:
    eth = dpkt.ethernet.Ethernet(frame)
    tcp = eth.data.data
    if tcp.sport == C_EP[1]:
        tcp.sport = port
    else:
        tcp.dport = port
    tcp.sum = 0
    eth.data.sum = 0
    return bytes(eth)


def test_ended_connections_are_closed_as_they_end() -> None:
    import io

    from ampcap.dump.pcap import read_capture
    from ampcap.wire.frames import Framing

    buf = io.BytesIO()
    writer = dpkt.pcap.Writer(buf)
    for i in range(3):
        for ts, frame in _ended_connection(41000 + i, T0 / 1000 + i, fin_first=i == 1, torn=i == 0):
            writer.writepkt(frame, ts=ts)
    buf.seek(0)
    events = [(e.where.src, "frame" if e.frame else e.error.code)
              for e in read_capture(buf, framing=Framing.RFC002, max_size=1 << 20)]
    # In capture order: the torn frame is reported when its connection ends,
    # not at the end of the capture; the FIN that overtook its ping did not
    # cut it off; the retransmitted FINs opened nothing.
    assert events == [
        ("10.0.0.2:7400", "frame"), ("10.0.0.1:41000", 1001),
        ("10.0.0.1:41001", "frame"), ("10.0.0.2:7400", "frame"),
        ("10.0.0.1:41002", "frame"), ("10.0.0.2:7400", "frame")]


def test_records_stream_out_while_the_capture_is_read(tmp_path: Path) -> None:
    # Records leave as soon as nothing later can change them; an invoke with
    # no reply yet holds back itself and what follows it, to flag it at the end.
    from ampcap.dump.records import Inspector
    from ampcap.dump.session import DumpSession
    from ampcap.dump.streams import StreamEvent, Where
    from ampcap.wire.frames import Frame
    from ampcap.wire.keyring import default_resolver

    consumed = 0
    emitted: list[tuple[int, str]] = []

    def events() -> Any:
        nonlocal consumed
        for i in range(50):
            typ, body = (MessageType.CAP_INVOKE, {"capability": "org.x.y", "version": "1.0.0"}) if i == 30 \
                else (MessageType.PING, None)
            _, f = msg(CLIENT, SERVER, typ, body, T0 + i)
            consumed += 1
            yield StreamEvent(Where("c2s", "a", "b"), float(i), frame=Frame(FrameType.AMP_MESSAGE, f[5:]))

    session = DumpSession(Inspector(default_resolver(), now_ms=T0))
    open_invokes = session.run_all(events(), lambda rec: emitted.append((consumed, rec.typ_name or "?")))
    assert emitted[:30] == [(i + 1, "PING") for i in range(30)]  # each out as soon as it was read
    assert [c for c, _ in emitted[30:]] == [50] * 20  # the open invoke and all after it: at the end
    assert emitted[30][1] == "CAP_INVOKE" and len(open_invokes) == 1
    # What waits is bounded in bytes as well as in records: past the budget
    # the oldest goes out (its flag, if it gets one, still counts).
    import ampcap.dump.session as session_module

    size = len(msg(CLIENT, SERVER, MessageType.PING, None, T0)[1]) - 5
    consumed, emitted = 0, []
    old, session_module.MAX_HELD_BYTES = session_module.MAX_HELD_BYTES, 5 * size
    try:
        DumpSession(Inspector(default_resolver(), now_ms=T0)).run_all(
            events(), lambda rec: emitted.append((consumed, rec.typ_name or "?")))
    finally:
        session_module.MAX_HELD_BYTES = old
    assert emitted[30][1] == "CAP_INVOKE" and 31 < emitted[30][0] < 40  # about five messages' worth, not 50
    assert "no terminal reply" in open_invokes[0].flags[0]


def _epb(iface: int, ts_units: int, data: bytes) -> Any:
    return dpkt.pcapng.EnhancedPacketBlockLE(iface_id=iface, ts_high=ts_units >> 32, ts_low=ts_units & 0xFFFFFFFF,
                                             caplen=len(data), pkt_len=len(data), pkt_data=data)


def test_pcapng_packets_are_read_with_their_own_interfaces_link_type_and_clock(tmp_path: Path, dump) -> None:
    """A pcapng capture on several interfaces: Ethernet (microseconds), raw IP
    (nanoseconds, tsresol 9) and one we cannot read (usbmon, 220). Each
    packet is decoded with its own interface's link type and timestamp, so
    the dump equals the one of the same packets on a single interface."""
    w, _ = build_session()
    single = tmp_path / "single.pcapng"
    write_capture(single, w, "pcapng")
    pcapng = dpkt.pcapng
    idbs = [pcapng.InterfaceDescriptionBlockLE(linktype=dpkt.pcap.DLT_EN10MB, snaplen=65535),
            pcapng.InterfaceDescriptionBlockLE(linktype=101, snaplen=65535,
                                               opts=[pcapng.PcapngOptionLE(code=pcapng.PCAPNG_OPT_IF_TSRESOL,
                                                                           data=b"\x09"),
                                                     pcapng.PcapngOptionLE(code=pcapng.PCAPNG_OPT_ENDOFOPT)]),
            pcapng.InterfaceDescriptionBlockLE(linktype=220, snaplen=65535)]
    mixed = tmp_path / "mixed.pcapng"
    with mixed.open("wb") as fp:
        writer = pcapng.Writer(fp, shb=pcapng.SectionHeaderBlockLE(), idb=idbs)
        for i, (ts, buf) in enumerate(w.packets):
            if i % 2:  # odd packets: raw IP on interface 1, nanosecond timestamps
                writer.writepkt(_epb(1, round(ts * 1e9), bytes(dpkt.ethernet.Ethernet(buf).data)))
            else:
                writer.writepkt(_epb(0, round(ts * 1e6), buf))
            writer.writepkt(_epb(2, round(ts * 1e6), b"\x00" * 64))  # usbmon noise, skipped
    code_single, out_single = dump(["--json", str(single)])
    code_mixed, out_mixed = dump(["--json", str(mixed)])
    assert code_single == code_mixed == 0
    assert out_mixed == out_single and out_single.count("\n") == 8


def test_pcapng_sections_restart_interfaces_and_may_change_byte_order(tmp_path: Path, dump) -> None:
    """The second half of the packets in a big-endian section whose only
    interface (id 0 again) is raw IP: read like one section."""
    w, _ = build_session()
    single = tmp_path / "single.pcapng"
    write_capture(single, w, "pcapng")
    pcapng = dpkt.pcapng
    half = len(w.packets) // 2
    two = tmp_path / "two.pcapng"
    with two.open("wb") as fp:
        first = pcapng.Writer(fp, shb=pcapng.SectionHeaderBlockLE(),
                              idb=[pcapng.InterfaceDescriptionBlockLE(linktype=dpkt.pcap.DLT_EN10MB, snaplen=65535)])
        for ts, buf in w.packets[:half]:
            first.writepkt(buf, ts=ts)
        fp.write(bytes(pcapng.SectionHeaderBlock()))
        fp.write(bytes(pcapng.InterfaceDescriptionBlock(linktype=101, snaplen=65535)))
        for ts, buf in w.packets[half:]:
            data, units = bytes(dpkt.ethernet.Ethernet(buf).data), round(ts * 1e6)
            fp.write(bytes(pcapng.EnhancedPacketBlock(iface_id=0, ts_high=units >> 32, ts_low=units & 0xFFFFFFFF,
                                                      caplen=len(data), pkt_len=len(data), pkt_data=data)))
    assert dump(["--json", str(two)]) == dump(["--json", str(single)])


def test_pcapng_with_no_interface_we_read_is_refused(tmp_path: Path, dump) -> None:
    path = tmp_path / "usb.pcapng"
    with path.open("wb") as fp:
        writer = dpkt.pcapng.Writer(fp, linktype=220)
        writer.writepkt(b"\x00" * 64, ts=T0 / 1000)
    with pytest.raises(AmpError, match="link type 220 is not supported"):
        dump([str(path)])


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_capture_down_a_pipe_is_shown_as_it_arrives(tmp_path: Path, fmt: str) -> None:
    """`tcpdump -w - | ampcap dump -`: records appear while the capture is
    still being written, not once the pipe closes."""
    import json
    import queue
    import subprocess
    import sys
    import threading

    w, _ = build_session()
    path = tmp_path / f"s.{fmt}"
    write_capture(path, w, fmt)
    data = path.read_bytes()
    cut = len(data) * 3 // 4  # the first connections' packets, not the end of the capture
    proc = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "dump", "--json", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=False)
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    proc.stdin.write(data[:cut])
    proc.stdin.flush()
    first = lines.get(timeout=30)  # blocks forever if the dump waits for the end of its input
    assert json.loads(first)["frame_type"] == "HANDSHAKE"
    assert proc.poll() is None  # still reading: the capture has not ended
    proc.stdin.write(data[cut:])
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert len([first, *rest]) == 8
