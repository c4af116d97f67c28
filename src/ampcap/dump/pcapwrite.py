"""Write what the live tap forwards as a pcap file, for later ``ampcap dump``
runs or Wireshark: one synthetic TCP/IPv4 flow per tapped connection, with
the real endpoints, a three-way handshake, and per-direction sequence
numbers, so any TCP reassembler sees exactly the bytes that passed.

The packets are built with dpkt (the same library that reads captures);
this module only keeps the per-flow sequence numbers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import BinaryIO

import dpkt

__all__ = ["PcapWriter"]

_MAX_SEGMENT = 65_000  # an IPv4 packet holds at most 65,535 bytes
_ISN = {"c2s": 1_000, "s2c": 500_000}


def _endpoint(text: str, fallback: str) -> tuple[bytes, int]:
    host, _, port = text.rpartition(":")
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        ip = ipaddress.ip_address(fallback)
    if ip.version != 4:  # keep one packet format: IPv6 peers get stand-in addresses
        ip = ipaddress.ip_address(fallback)
    return ip.packed, int(port)


@dataclass(slots=True)
class _Flow:
    client: tuple[bytes, int]
    server: tuple[bytes, int]
    seq: dict[str, int] = field(default_factory=lambda: dict(_ISN))


class PcapWriter:
    def __init__(self, fp: BinaryIO) -> None:
        # The header's snaplen must cover our largest packet (up to ~64 KiB):
        # libpcap tools cut every packet to it when they rewrite the file.
        self._writer = dpkt.pcap.Writer(fp, snaplen=262_144)
        self._fp = fp
        self._flows: dict[int, _Flow] = {}

    def open(self, conn: int, client: str, server: str, ts: float) -> None:
        flow = self._flows[conn] = _Flow(_endpoint(client, "10.0.0.1"), _endpoint(server, "10.0.0.2"))
        self._packet(flow, "c2s", ts, b"", dpkt.tcp.TH_SYN)
        flow.seq["c2s"] += 1
        self._packet(flow, "s2c", ts, b"", dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
        flow.seq["s2c"] += 1
        self._packet(flow, "c2s", ts, b"", dpkt.tcp.TH_ACK)

    def data(self, conn: int, direction: str, payload: bytes, ts: float) -> None:
        flow = self._flows[conn]
        for start in range(0, len(payload), _MAX_SEGMENT):
            chunk = payload[start:start + _MAX_SEGMENT]
            self._packet(flow, direction, ts, chunk, dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH)
            flow.seq[direction] = (flow.seq[direction] + len(chunk)) & 0xFFFFFFFF
        self._fp.flush()

    def close(self, conn: int, direction: str, ts: float) -> None:
        flow = self._flows.get(conn)
        if flow is not None:
            self._packet(flow, direction, ts, b"", dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK)
            flow.seq[direction] = (flow.seq[direction] + 1) & 0xFFFFFFFF
            self._fp.flush()

    def _packet(self, flow: _Flow, direction: str, ts: float, payload: bytes, flags: int) -> None:
        src, dst = (flow.client, flow.server) if direction == "c2s" else (flow.server, flow.client)
        other = "s2c" if direction == "c2s" else "c2s"
        tcp = dpkt.tcp.TCP(sport=src[1], dport=dst[1], seq=flow.seq[direction], ack=flow.seq[other],
                           flags=flags, data=payload)
        ip = dpkt.ip.IP(src=src[0], dst=dst[0], p=dpkt.ip.IP_PROTO_TCP, data=tcp)
        ip.len = len(ip)
        eth = dpkt.ethernet.Ethernet(src=b"\x02\x00\x00\x00\x00\x01", dst=b"\x02\x00\x00\x00\x00\x02",
                                     type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
        self._writer.writepkt(bytes(eth), ts=ts)
