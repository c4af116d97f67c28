"""pcap / pcapng input: packets → TCP streams reassembled per direction → frames.

Library choice: ``dpkt`` reads both pcap and pcapng, parses Ethernet/SLL/IP/TCP
headers and is small and pure Python; it leaves TCP reassembly to us, which is
the part we want to control (scapy is heavy; pyshark needs the tshark binary).
pcapng blocks are walked here and parsed by dpkt's block classes, because
its pcapng reader applies the first interface's link type to every packet.

Reassembly keeps, per direction, the next expected sequence number (32-bit
wrap-around arithmetic) and a bounded map of segments that arrived early.
Retransmissions and overlaps are trimmed to the bytes not yet delivered;
out-of-order segments wait until the gap fills. A gap that never fills, or
pending data over the bound, ends that direction with a finding.

A file that ends early (a capture still being written, a copy cut short)
is a capture all the same: the packets before the cut are shown, then one
finding (:class:`CaptureCut`) says where the cut fell, whether in the file
header, a record's header or its data. A file whose headers cannot be
right (no byte-order mark, an unsupported link type, a length no capture
has) is not a capture: an error, or after its first packet a finding.
"""

from __future__ import annotations

import heapq
import itertools
import ipaddress
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import dpkt

from ..errors import AmpError
from ..wire.frames import Framing
from .httpws import SniffingStream, sniffing_stream
from .streams import PrefixedReader, StreamEvent, Where, read_fully

__all__ = ["read_capture", "CaptureCut", "TcpReassembler", "MAX_PENDING_BYTES"]

_MASK = 0xFFFF_FFFF
MAX_PENDING_BYTES = 16 << 20  # out-of-order data held per direction
_MAX_RETIRED = 65_536  # ended connections remembered, to drop their stragglers
_SYN, _ACK, _FIN, _RST = dpkt.tcp.TH_SYN, dpkt.tcp.TH_ACK, dpkt.tcp.TH_FIN, dpkt.tcp.TH_RST

Endpoint = tuple[str, int]


def _seq_delta(a: int, b: int) -> int:
    """Signed distance from b to a in 32-bit sequence space."""
    d = (a - b) & _MASK
    return d - (1 << 32) if d >= 1 << 31 else d


@dataclass(slots=True)
class TcpReassembler:
    """In-order byte delivery for one TCP direction.

    Early segments are held by their offset in the stream (sequence numbers
    unwrapped, so they order), with a heap of those offsets: a gap that
    fills releases what waited in O(k log k). (Rescanning every held segment
    after each release was quadratic: 8,000 one-byte segments in reverse
    order took 6 s, a small crafted capture could take hours.)
    """

    next_seq: int | None = None
    pending: dict[int, bytes] = field(default_factory=dict)  # stream offset → longest copy
    pending_bytes: int = 0
    failed: str | None = None
    fin_seq: int | None = None  # where this direction's FIN sits in sequence space
    offset: int = 0  # stream offset of next_seq
    _starts: list[int] = field(default_factory=list)  # heap of the offsets in pending

    def syn(self, seq: int) -> None:
        self.next_seq = (seq + 1) & _MASK

    def segment(self, seq: int, data: bytes) -> bytes:
        """Bytes that become deliverable thanks to this segment."""
        if self.failed or not data:
            return b""
        if self.next_seq is None:  # capture started mid-stream
            self.next_seq = seq
        delta = _seq_delta(seq, self.next_seq)
        if delta > 0:  # arrived early: hold it (keep the longest copy)
            at = self.offset + delta
            held = self.pending.get(at)
            if held is None:
                heapq.heappush(self._starts, at)
            if held is None or len(data) > len(held):
                self.pending_bytes += len(data) - (len(held) if held is not None else 0)
                self.pending[at] = data
            if self.pending_bytes > MAX_PENDING_BYTES:
                self.failed = f"more than {MAX_PENDING_BYTES} bytes out of order (missing segment?)"
            return b""
        if -delta >= len(data):
            return b""  # pure retransmission
        out = bytearray(data[-delta:])
        self._advance(len(out))
        # Release held segments that now touch or overlap the delivered edge.
        starts = self._starts
        while starts and starts[0] <= self.offset:
            at = heapq.heappop(starts)
            held = self.pending.pop(at)
            self.pending_bytes -= len(held)
            overlap = self.offset - at
            if overlap < len(held):
                out += held[overlap:]
                self._advance(len(held) - overlap)
        return bytes(out)

    @property
    def finished(self) -> bool:
        """A FIN was seen and every byte before it delivered (a FIN that
        overtook data waits for it)."""
        if self.fin_seq is None:
            return False
        return self.next_seq is None or _seq_delta(self.next_seq, self.fin_seq) >= 0

    def _advance(self, n: int) -> None:
        assert self.next_seq is not None
        self.offset += n
        self.next_seq = (self.next_seq + n) & _MASK

    def gap(self) -> str | None:
        if self.failed:
            return self.failed
        if self.pending:
            return f"{self.pending_bytes} bytes after a gap in the TCP stream never became contiguous"
        return None


@dataclass(slots=True)
class _Connection:
    client: Endpoint
    server: Endpoint
    flows: dict[Endpoint, tuple[TcpReassembler, SniffingStream]]


def _fmt(ep: Endpoint) -> str:
    host, port = ep
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Source:
    """The capture read front to back, its bytes counted: a cut is reported
    by where it falls. ``read(n)`` returns ``n`` bytes unless the file ends
    (a pipe may hand over less at a time)."""

    def __init__(self, fp: BinaryIO | PrefixedReader) -> None:
        self._fp = fp
        self.offset = 0

    def read(self, n: int) -> bytes:
        data = read_fully(self._fp, n)
        self.offset += len(data)
        return data


class _Cut(Exception):
    """The file ends inside a structure; the message says which one (the
    reader that raises it knows, ``_packets`` adds the byte offset)."""


_MAX_RECORD = 64 << 20  # far above any real snaplen (262144 by default): more is a damaged length


def _need(src: _Source, n: int, what: str) -> bytes:
    data = src.read(n)
    if len(data) < n:
        raise _Cut(f"inside {what} ({len(data)} of its {n} bytes)")
    return data


class _PcapReader:
    """Classic pcap, record by record. Walked here rather than by dpkt's
    Reader, which hands back whatever a record's read returned (a cut record
    would pass as a short packet) and reports a cut record header in its own
    words; dpkt's header classes still parse the fields."""

    def __init__(self, src: _Source) -> None:
        self._src = src
        head = _need(src, dpkt.pcap.FileHdr.__hdr_len__, "its file header")
        magic = dpkt.pcap.FileHdr(head).magic
        if magic in (dpkt.pcap.PMUDPCT_MAGIC, dpkt.pcap.PMUDPCT_MAGIC_NANO, dpkt.pcap.PACPDOM_MAGIC):
            header = dpkt.pcap.LEFileHdr(head)
        else:
            header = dpkt.pcap.FileHdr(head)
        if magic not in dpkt.pcap.MAGIC_TO_PKT_HDR:
            raise ValueError(f"unknown pcap magic 0x{magic:08x}")
        self._record = dpkt.pcap.MAGIC_TO_PKT_HDR[magic]
        self._divisor = 1e9 if magic in (dpkt.pcap.TCPDUMP_MAGIC_NANO, dpkt.pcap.PMUDPCT_MAGIC_NANO) else 1e6
        self.link: int = header.linktype

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        size = self._record.__hdr_len__
        for n in itertools.count(1):
            head = self._src.read(size)
            if not head:
                return
            if len(head) < size:
                raise _Cut(f"inside the header of record {n} ({len(head)} of its {size} bytes)")
            record = self._record(head)
            if record.caplen > _MAX_RECORD:
                raise ValueError(f"record {n} declares {record.caplen} captured bytes (a damaged length)")
            data = _need(self._src, record.caplen, f"record {n}")
            yield record.tv_sec + record.tv_usec / self._divisor, data


def _raw_ip(buf: bytes) -> Any:
    return dpkt.ip.IP(buf) if buf[:1] and buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)


# The link types we read: each one's layer-3 packet from a captured frame.
_NETWORK_LAYER: dict[int, Callable[[bytes], Any]] = {
    dpkt.pcap.DLT_EN10MB: lambda buf: dpkt.ethernet.Ethernet(buf).data,
    dpkt.pcap.DLT_LINUX_SLL: lambda buf: dpkt.sll.SLL(buf).data,
    276: lambda buf: dpkt.sll2.SLL2(buf).data,  # LINUX_SLL2: what `tcpdump -i any` writes today
    dpkt.pcap.DLT_NULL: lambda buf: dpkt.loopback.Loopback(buf).data,
    dpkt.pcap.DLT_LOOP: lambda buf: dpkt.loopback.Loopback(buf).data,
    **dict.fromkeys((dpkt.pcap.DLT_RAW, 101, 228, 229), _raw_ip),  # raw IP variants
}


_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"  # a section header's block type, the same in either byte order


@dataclass(frozen=True, slots=True)
class _Interface:
    link: int
    divisor: float  # timestamp units per second
    offset: int  # seconds added to every timestamp


class _PcapngReader:
    """pcapng block by block, each block parsed by dpkt's block classes.

    dpkt's own pcapng Reader keeps only the first interface: every packet
    gets that interface's link type and timestamp resolution, so in a
    capture on two interfaces (lo and eth0, a tun device next to Ethernet)
    the second one's packets would be decoded as the first one's. Here each
    packet carries its own interface's link type and timestamp; a new
    section starts a new interface list (and may change byte order).
    """

    def __init__(self, src: _Source) -> None:
        self._src = src
        self._le = True
        self.interfaces: list[_Interface] = []
        self.links_seen: set[int] = set()

    def __iter__(self) -> Iterator[tuple[float, bytes, int]]:
        pcapng = dpkt.pcapng
        for n in itertools.count(1):
            head = self._src.read(8)
            if not head:
                return
            what = f"block {n}"
            if len(head) < 8:
                raise _Cut(f"inside the header of {what} ({len(head)} of its 8 bytes)")
            if head[:4] == _PCAPNG_SHB:
                self._section(head, what)
                continue
            if n == 1:
                raise ValueError("a pcapng file starts with a section header block")
            block_type, length = struct.unpack("<II" if self._le else ">II", head)
            if length < 12 or length % 4 or length > _MAX_RECORD:
                raise ValueError(f"{what} (type {block_type}) declares a length of {length} bytes")
            buf = head + _need(self._src, length - 8, what)
            if block_type == pcapng.PCAPNG_BT_IDB:
                idb = (pcapng.InterfaceDescriptionBlockLE if self._le else pcapng.InterfaceDescriptionBlock)(buf)
                self.interfaces.append(self._interface(idb))
                self.links_seen.add(idb.linktype)
            elif block_type in (pcapng.PCAPNG_BT_EPB, pcapng.PCAPNG_BT_PB):
                cls = ((pcapng.EnhancedPacketBlockLE if self._le else pcapng.EnhancedPacketBlock)
                       if block_type == pcapng.PCAPNG_BT_EPB else
                       (pcapng.PacketBlockLE if self._le else pcapng.PacketBlock))
                block = cls(buf)
                if block.iface_id >= len(self.interfaces):
                    raise ValueError(f"a packet names interface {block.iface_id}, but its section "
                                     f"describes {len(self.interfaces)}")
                iface = self.interfaces[block.iface_id]
                ts = iface.offset + ((block.ts_high << 32) | block.ts_low) / iface.divisor
                yield ts, block.pkt_data, iface.link
            # Other blocks (statistics, name resolution, simple packets
            # without a timestamp or interface) carry nothing we show.

    def _section(self, head: bytes, what: str) -> None:
        head += _need(self._src, 4, f"the byte-order mark of {what}")
        bom = head[8:12]
        if bom == struct.pack("<I", dpkt.pcapng.BYTE_ORDER_MAGIC):
            self._le = True
        elif bom == struct.pack(">I", dpkt.pcapng.BYTE_ORDER_MAGIC):
            self._le = False
        else:
            raise ValueError("a pcapng section header with an unknown byte-order mark")
        (length,) = struct.unpack("<I" if self._le else ">I", head[4:8])
        if length < 28 or length % 4 or length > _MAX_RECORD:
            raise ValueError(f"a section header declares a length of {length} bytes")
        buf = head + _need(self._src, length - 12, what)
        shb = (dpkt.pcapng.SectionHeaderBlockLE if self._le else dpkt.pcapng.SectionHeaderBlock)(buf)
        if shb.v_major != dpkt.pcapng.PCAPNG_VERSION_MAJOR:
            raise ValueError(f"pcapng version {shb.v_major}.{shb.v_minor} is not supported")
        self.interfaces = []  # interface ids are per section

    def _interface(self, idb: Any) -> _Interface:
        divisor, offset = 1e6, 0  # pcapng's defaults: microseconds, no offset
        for opt in idb.opts:
            if opt.code == dpkt.pcapng.PCAPNG_OPT_IF_TSRESOL and opt.data:
                # High bit clear: a negative power of ten; set: of two.
                value = opt.data[0]
                divisor = float((2 if value & 0x80 else 10) ** (value & 0x7F))
            elif opt.code == dpkt.pcapng.PCAPNG_OPT_IF_TSOFFSET and len(opt.data) == 8:
                (offset,) = struct.unpack("<q" if self._le else ">q", opt.data)
        return _Interface(idb.linktype, divisor, offset)


def _unsupported(link: int) -> AmpError:
    return AmpError(1001, f"link type {link} is not supported (Ethernet, Linux cooked v1/v2, loopback "
                          "and raw IP are); capture on one interface, not 'any', or convert the file")


class CaptureCut(AmpError):
    """The capture file ends inside a record: what came before the cut is
    shown, and this finding says where the cut fell. The same wherever it
    falls (a file header, a record header, a record's data), and a finding
    like any other: ``ampcap dump`` exits 0, or 1 with ``--strict``."""

    def __init__(self, message: str) -> None:
        super().__init__(1001, message, path="capture")


def _packets(raw_fp: BinaryIO) -> Iterator[tuple[float, bytes, int]]:
    # Read front to back, never seeking: a capture may come down a pipe
    # (`tcpdump -w - | ampcap dump -`) and is shown packet by packet as it comes.
    magic = raw_fp.read(4)
    src = _Source(PrefixedReader(magic, raw_fp))
    count = 0
    try:
        if magic == _PCAPNG_SHB:
            reader = _PcapngReader(src)
            for ts, buf, link in reader:
                if link not in _NETWORK_LAYER:
                    # Another interface's packets (usbmon next to eth0) are
                    # skipped; a file with no interface we read is refused.
                    if not any(seen in _NETWORK_LAYER for seen in reader.links_seen):
                        raise _unsupported(link)
                    continue
                count += 1
                yield ts, buf, link
        else:
            classic = _PcapReader(src)
            if classic.link not in _NETWORK_LAYER:
                raise _unsupported(classic.link)
            for ts, buf in classic:
                count += 1
                yield ts, buf, classic.link
    except _Cut as cut:
        raise CaptureCut(f"the capture is cut short after {count} packet{'s' if count != 1 else ''}: "
                         f"the file ends at byte {src.offset}, {cut}") from None
    except AmpError:
        raise
    except Exception as exc:  # dpkt's header classes fail in assorted ways on damaged files (see _tcp_of)
        raise AmpError(1001, f"not a readable pcap/pcapng file: {exc}") from exc


def _tcp_of(buf: bytes, link: int) -> tuple[str, str, dpkt.tcp.TCP] | None:
    network_layer = _NETWORK_LAYER.get(link)
    if network_layer is None:
        return None
    try:
        ip = network_layer(buf)
    except Exception:
        # Not a packet we can show. dpkt reports malformed packets with
        # assorted exceptions, not only its own Error (AttributeError from an
        # IPv6 extension header chain, found by fuzzing), and a damaged
        # capture must still show every packet that does parse.
        return None
    if isinstance(ip, dpkt.ip.IP):
        src, dst = str(ipaddress.IPv4Address(ip.src)), str(ipaddress.IPv4Address(ip.dst))
    elif isinstance(ip, dpkt.ip6.IP6):
        src, dst = str(ipaddress.IPv6Address(ip.src)), str(ipaddress.IPv6Address(ip.dst))
    else:
        return None
    tcp = ip.data
    if not isinstance(tcp, dpkt.tcp.TCP):
        return None
    return src, dst, tcp


def read_capture(fp: BinaryIO, *, framing: Framing | None, max_size: int,
                 port: int | None = None) -> Iterator[StreamEvent]:
    """Frames of every TCP connection in a pcap/pcapng file, in capture order.

    A connection is closed (and forgotten) once both directions have ended
    with every byte delivered, or at a RST, so memory follows the
    connections open at one time, not all the capture ever held. Packets on
    its 4-tuple after that are stragglers (a retransmitted FIN) and are
    dropped, unless a SYN opens a new connection.
    """
    conns: dict[frozenset[Endpoint], _Connection] = {}
    retired: OrderedDict[frozenset[Endpoint], None] = OrderedDict()
    last_ts: float | None = None
    packets = _packets(fp)
    while True:
        try:
            ts, buf, link = next(packets)
        except StopIteration:
            break
        except AmpError as exc:
            if last_ts is None and not isinstance(exc, CaptureCut):
                raise  # not a capture at all: one line from the CLI
            # A capture cut short (wherever the cut falls), or damaged after
            # its first packet: report it and still close every flow, so
            # what was captured is all shown.
            yield StreamEvent(Where(), last_ts, error=exc)
            break
        last_ts = ts
        parsed = _tcp_of(buf, link)
        if parsed is None:
            continue
        src_ip, dst_ip, tcp = parsed
        a, b = (src_ip, tcp.sport), (dst_ip, tcp.dport)
        if port is not None and port not in (tcp.sport, tcp.dport):
            continue
        key = frozenset((a, b))
        conn = conns.get(key)
        syn_ack = tcp.flags & _SYN and tcp.flags & _ACK
        pure_syn = tcp.flags & _SYN and not tcp.flags & _ACK
        if conn is None and key in retired:
            if not pure_syn:
                continue  # after the end of a connection already shown
            del retired[key]
        if conn is None or (pure_syn and conn.flows[a][0].next_seq != (tcp.seq + 1) & _MASK):
            # New connection, or the 4-tuple reused with a fresh SYN (a new
            # initial sequence number; a retransmitted SYN keeps it). The SYN sender
            # is the client; without a handshake in the capture, the first
            # sender is, unless what we see first is the SYN-ACK.
            client, server = (b, a) if syn_ack else (a, b)
            if conn is not None:
                yield from _close(conn, ts)
            conn = _Connection(client, server, {})
            for ep, other, direction in ((client, server, "c2s"), (server, client, "s2c")):
                conn.flows[ep] = (TcpReassembler(),
                                  sniffing_stream(Where(direction, _fmt(ep), _fmt(other)), framing, max_size))
            conns[key] = conn
        reasm, stream = conn.flows[a]
        if tcp.flags & _SYN:
            reasm.syn(tcp.seq)
        data = reasm.segment(tcp.seq, bytes(tcp.data))
        if data:
            yield from stream.feed(data, ts)
        if tcp.flags & _FIN:
            reasm.fin_seq = (tcp.seq + len(tcp.data)) & _MASK
        if tcp.flags & _RST or all(flow.finished for flow, _ in conn.flows.values()):
            yield from _close(conn, ts)
            del conns[key]
            retired[key] = None
            if len(retired) > _MAX_RETIRED:
                retired.popitem(last=False)
    for conn in conns.values():
        yield from _close(conn, last_ts)


def _close(conn: _Connection, at: float | None) -> Iterator[StreamEvent]:
    for reasm, stream in conn.flows.values():
        problem = reasm.gap()
        if problem:
            yield StreamEvent(stream.where, at, error=AmpError(1001, f"TCP reassembly: {problem}", path="tcp"))
        yield from stream.close(at)

