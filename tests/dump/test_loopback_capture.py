"""A real loopback session, recorded by the live tap into a pcap file
(``--write-pcap``), then read back by ``ampcap dump``: every message is
decoded, signed correctly, and every invoke is correlated with exactly one
terminal reply."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from ampcap.caps.demo import demo_manifest
from ampcap.dump.pcapwrite import PcapWriter
from ampcap.errors import AmpError
from ampcap.net.api.peer import Peer, connect
from ampcap.net.features.tap import run_tap
from ampcap.wire.identity import Identity


async def record_session(pcap: Path) -> None:
    provider = Peer(Identity.generate(os.urandom), manifest=demo_manifest())
    with pcap.open("wb") as fp:
        recorder = PcapWriter(fp)
        async with provider.serve("amp://127.0.0.1:0") as server, trio.open_nursery() as nursery:
            upstream_port = int(server.url.rsplit(":", 1)[1])
            tap_port = await nursery.start(lambda task_status: run_tap(
                ("127.0.0.1", 0), ("127.0.0.1", upstream_port), framing=None, max_size=1 << 24,
                on_event=lambda event: None, clock=time.time, recorder=recorder, task_status=task_status))
            async with connect(f"amp://127.0.0.1:{tap_port}", identity=Identity.generate(os.urandom)
                               ) as remote:
                assert await remote.invoke("org.ampcap.demo.math.add:1.0.0", params={"a": 1, "b": 2}) == {"sum": 3}
                assert (await remote.invoke("org.ampcap.demo.echo", range=">=1.0.0 <2.0.0",
                                            params={"message": "hi"}))["version"] == "1.1.0"
                assert await remote.invoke("org.ampcap.demo.sleep:1.0.0", params={"ms": 50}) == {"slept_ms": 50}
                with pytest.raises(AmpError):
                    await remote.invoke("org.ampcap.demo.fail:1.0.0")
                with pytest.raises(AmpError):
                    await remote.invoke("org.example.nothing:1.0.0")
                assert len(await remote.query("echo")) == 3
            await trio.sleep(0.2)  # let the tap copy the close
            nursery.cancel_scope.cancel()


def test_tap_recording_dumps_with_every_message_decoded_and_correlated(tmp_path: Path, dump: Any,
                                                                      jrecords: Any) -> None:
    pcap = tmp_path / "session.pcap"
    trio.run(record_session, pcap)
    # The header's snaplen covers every packet written, or libpcap tools rewriting the file would cut them.
    import dpkt

    with pcap.open("rb") as fp:
        reader = dpkt.pcap.Reader(fp)
        assert all(len(buf) <= reader.snaplen for _, buf in reader)
    code, out = dump(["--json", "--strict", str(pcap)])
    records = jrecords(out)
    messages = [r for r in records if r["typ_name"]]
    assert code == 0, [r for r in records if r["errors"] or r["flags"]][:3]
    names = [r["typ_name"] for r in messages]
    assert names[:2] == ["HELLO", "HELLO_ACK"]
    assert names.count("CAP_INVOKE") == 5 and names.count("CAP_RESULT") == 4 and names.count("ERROR") == 1
    assert names.count("CAP_QUERY") == 1 and names.count("CAP_DECLARE") == 1 and "PROGRESS" in names
    for r in messages:
        assert r["errors"] == [] and r["flags"] == [], r
        assert r["signature"] == "valid" and r["cddl"]["status"] == "valid", r
    invokes = {r["id"] for r in messages if r["typ_name"] == "CAP_INVOKE"}
    terminals = [r for r in messages if r["typ_name"] in ("CAP_RESULT", "ERROR") and r["answers"]]
    assert sorted(t["answers"]["id"] for t in terminals) == sorted(invokes)  # exactly one each
    assert all(t["latency_ms"] is not None and t["latency_ms"] >= 0 for t in terminals)
    code, text = dump(["--color", "never", str(pcap)])
    assert "invoke latency ms (n=5)" in text and "without a terminal reply" not in text
