"""The benchmarks in tools/ still run (a short ``--quick`` pass each).

They measure speed against baselines in the same run; these tests only keep
them from rotting, and check that they print the figures docs/performance.md quotes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).parents[1] / "tools"


def run_tool(*argv: str, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, str(TOOLS / argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_bench_wire_quick() -> None:
    out = run_tool("bench_wire.py", "--quick")
    assert "floor" in out


def test_bench_cddl_quick() -> None:
    out = run_tool("bench_cddl.py", "--quick")
    assert "ampcap, envelope + body, valid" in out and "ampcap / pycddl" in out


def test_bench_caps_quick() -> None:
    out = run_tool("bench_caps.py", "--quick")
    assert "name + range query" in out and "negotiation over 1,000 versions" in out


@pytest.mark.slow
def test_bench_daemon_quick() -> None:
    out = run_tool("bench_daemon.py", "--quick", "--only", "ampcap")
    assert "daemon CPU per invoke" in out and "Ed25519 sign+verify here" in out
    # The unbatched load (tools/loadgen.py): its rows, and their CPU in Ed25519 units.
    assert "ampcap unbatched (none)" in out and "× Ed25519 at 1" in out and "× Ed25519 at 16" in out
    assert "ERROR replies" not in out


@pytest.mark.slow
def test_bench_daemon_durability_quick() -> None:
    out = run_tool("bench_daemon.py", "--quick", "--shape", "durability")
    # The journal's cost: each store setting's rows, and its ratios over --state-dir none.
    for name in ("none", "journal", "journal, power"):
        assert f"ampcap unbatched ({name})" in out
    assert "journal / none: " in out and "× CPU and " in out and "at 64 in flight" in out
    assert "daemon peak RSS: none " in out and "ERROR replies" not in out


def test_profile_invoke_help() -> None:
    # It needs valgrind and minutes, so the suite only checks that it loads
    # (its imports: loadgen, bench_bindings) and says what it does.
    out = run_tool("profile_invoke.py", "--help")
    assert "--side" in out and "callgrind" in out


def test_bench_cancel_quick() -> None:
    out = run_tool("bench_cancel.py", "--quick")
    assert "cancel of a running one" in out and "a cancel's daemon CPU / a plain invoke's" in out


def test_bench_tracing_quick() -> None:
    pytest.importorskip("opentelemetry.sdk")
    out = run_tool("bench_tracing.py", "--quick")
    assert "tracing adds" in out and "a traced invoke's daemon CPU / a plain one's" in out


def test_bench_protocol_quick() -> None:
    out = run_tool("bench_protocol.py", "--quick")
    assert "Ed25519 sign + verify here" in out and "least a sequential round trip" in out
    rows = [line.split("|") for line in out.splitlines() if line.strip().startswith(("64 |", "1 |"))]
    assert len(rows) == 2
    for row in rows:  # daemon and client each spend more than their one sign + verify
        assert float(row[2]) > 0 and float(row[4]) > 0


def test_flood_unread_short() -> None:
    out = run_tool("flood_unread.py", "--connections", "3", "--seconds", "2")
    assert "3 peers sent" in out and "peak growth / bound" in out
    growth = float(out.split("peak growth / bound = ")[1].split()[0])
    assert growth < 1.0  # three flooders pin less than the shared budget promises


def test_flood_large_frames_short() -> None:
    out = run_tool("flood_large_frames.py", "--connections", "3", "--seconds", "1")
    before, after = out.split("after HELLO:")
    assert "before the handshake:" in before and "0 connections were still open" in before
    ratios = [float(part.split("peak growth / bound = ")[1].split()[0]) for part in (before, after)]
    assert ratios[0] < 1.0 and ratios[1] < 1.0, out
    assert "3 connections were still open" in after  # admitted, not refused


def test_bench_conformance_quick() -> None:
    out = run_tool("bench_conformance.py", "--quick", "--batch", "8")
    assert "plain invoke" in out and "authcrypt invoke" in out and "exact resend (R8)" in out


def test_bench_startup_quick() -> None:
    out = run_tool("bench_startup.py", "--quick")
    assert "ampcap invoke (demo math.add)" in out and "invoke / baseline: wall" in out


def test_bench_bindings_quick() -> None:
    out = run_tool("bench_bindings.py", "--quick")
    assert "binding / direct, 1 in flight" in out and "a plain invoke" in out


def test_bench_delegation_quick() -> None:
    out = run_tool("bench_delegation.py", "--quick", "--batch", "8")
    assert "depth-3, repeated" in out and "repeated depth-3 chain / plain invoke" in out
    assert "first seen, parse free" in out and "over the repeated chain" in out


def test_bench_delegation_daemon_quick() -> None:
    out = run_tool("bench_delegation_daemon.py", "--quick")
    assert "first seen (depth 3)" in out and "repeated 64 in flight" in out
    assert "verifications over a plain invoke" in out


def test_bench_mcp_gateway_quick() -> None:
    pytest.importorskip("mcp")
    out = run_tool("bench_mcp_gateway.py", "--quick")
    rows = {line[:22].strip(): line[22:].split() for line in out.splitlines()[2:]}  # after the two heading lines
    assert set(rows) == {"python api", "gateway, in process", "gateway, stdio", "bare SDK server", "bare SDK server, stdio"}
    assert all(float(values[0]) > 0 for values in rows.values())
    assert rows["gateway, stdio"][2].startswith("+")  # the p50 each way adds over the Python API
    assert float(rows["gateway, in process"][-1]) > 0  # the CPU time each call costs this process


@pytest.mark.slow
def test_bench_http_quick() -> None:
    out = run_tool("bench_http.py", "--quick", "--no-mcp")
    assert "ampcap WebSocket" in out and "ampcap HTTP POST (200)" in out
    assert "AMPS / WebSocket throughput, 64 in flight" in out


@pytest.mark.slow
def test_bench_sessions_quick() -> None:
    out = run_tool("bench_sessions.py", "--quick")
    assert "session/plain 64" in out and "state-dir/none 64" in out


def test_bench_store_quick() -> None:
    out = run_tool("bench_store.py", "--quick")
    assert "SQLite (process)" in out and "commit 64 rows" in out and "claim + complete" in out


def test_bench_relay_quick() -> None:
    out = run_tool("bench_relay.py", "--quick")
    assert "sign+verify (reference)" in out and "disk per queued message" in out and "poll p50" in out


def test_bench_payments_quick() -> None:
    out = run_tool("bench_payments.py", "--quick")
    assert "Ed25519 sign + verify" in out and "capture, replayed" in out and "WAL file" in out


@pytest.mark.slow
def test_bench_scale_quick() -> None:
    out = run_tool("bench_scale.py", "--quick", "--no-postgres", timeout=240)
    assert "SQLite, 2 workers |" in out and "2 workers / 1 worker on SQLite" in out
    assert "this machine, 2 CPU-bound processes / 1" in out
