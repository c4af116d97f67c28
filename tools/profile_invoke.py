"""Instructions per unbatched invoke, on each side, under callgrind.

Instruction counts do not move with a noisy machine's load the way CPU time
does, so this is how docs/performance.md compares versions of the hot path.

* ``--side daemon``: ``ampcap serve --demo --state-dir none`` runs under
  ``valgrind --tool=callgrind`` with instrumentation off; the load generator
  (``tools/loadgen.py``: N connections, one write per message, one invoke in
  flight each) opens its sessions and warms up, then instrumentation is
  switched on (``callgrind_control -i on``) for the timed run and off after
  it. Instructions / invokes answered.
* ``--side client``: the Python API (``ampcap.net.api.peer.connect``), one
  invoke in flight, under callgrind against a plain daemon, run twice with a
  different number of calls: the difference / the difference in calls, so
  start-up and shutdown cancel out.

* ``--side binding``: the MCP binding's own share in instructions
  (issue 34 item 3): ``serve --manifest`` with ``tools/bench_bindings.py``'s
  manifest under callgrind, instrumented for N sequential calls of the
  bound tool and then N plain invokes (two daemons); the SDK's own
  ``tools/call`` in a client process (two runs, the difference). The share
  is binding − plain − direct.

Each reports the share in Ed25519 (libsodium's ``crypto_sign*`` functions,
inclusive) and, with ``--top N``, the N costliest functions inclusive (C
level: the interpreter's own functions, trio's syscalls, libsodium; pair it
with ``py-spy`` or cProfile for the Python functions).

    python tools/profile_invoke.py --side daemon --connections 1 [--seconds 20]
    python tools/profile_invoke.py --side client [--calls 200]
    python tools/profile_invoke.py --side binding [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import loadgen  # noqa: E402

import trio  # noqa: E402

SERVE = ["-m", "ampcap.cli.main", "serve", "--demo", "--listen", "127.0.0.1:0", "--state-dir", "none",
         "--max-in-flight-per-connection", "256"]


def _valgrind(out: str, instr_at_start: bool) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            f"--instr-atstart={'yes' if instr_at_start else 'no'}", "--dump-instr=no"]


def _totals(path: str) -> int:
    done = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True, text=True,
                          check=True)
    for line in done.stdout.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", ""))
    raise RuntimeError(f"no totals in {path}")


def _inclusive(path: str, top: int) -> tuple[int, list[tuple[int, str]]]:
    """(Ed25519's inclusive instructions, the ``top`` costliest functions inclusive)."""
    done = subprocess.run(["callgrind_annotate", "--inclusive=yes", f"--threshold=100", path],
                          capture_output=True, text=True, check=True)
    rows = []
    for line in done.stdout.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S.*)", line) or re.match(r"\s*([\d,]+)\s+(\S.*)", line)
        if m and ":" in m.group(2) and "'" not in m.group(2).split()[0]:  # recursion levels ('2) count twice
            rows.append((int(m.group(1).replace(",", "")), m.group(2).strip()))
    sign = max((n for n, name in rows if re.search(r"crypto_sign_ed25519_detached\b|crypto_sign_detached\b",
                                                     name)), default=0)
    verify = max((n for n, name in rows if re.search(r"crypto_sign_ed25519_verify_detached\b|"
                                                       r"crypto_sign_verify_detached\b", name)), default=0)
    return sign + verify, rows[:top]


def profile_daemon(connections: int, seconds: float, top: int) -> None:
    home = tempfile.mkdtemp(prefix="ampcap-callgrind-")
    out = os.path.join(home, "callgrind.out")
    proc = subprocess.Popen([*_valgrind(out, False), sys.executable, *SERVE], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "XDG_CONFIG_HOME": home})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[0]

        async def drive() -> loadgen.LoadResult:
            prepared = await loadgen.prepare(url, connections, 20 + int(200 * seconds))
            try:
                await loadgen.warm_up(prepared)
                subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
                result = await loadgen.run_load(prepared, seconds)
                subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
                return result
            finally:
                await prepared.aclose()

        result = trio.run(drive)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        report(f"daemon, {connections} unbatched connection(s)", out, result.calls, top)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


_CLIENT = """
import os, sys, trio
from ampcap.net.api.peer import connect
from ampcap.wire.identity import Identity
async def main(url, calls):
    async with connect(url, identity=Identity.generate(os.urandom)) as remote:
        for _ in range(calls):
            await remote.invoke("org.ampcap.demo.echo:1.0.0", params={"message": "x" * 160})
trio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def profile_client(calls: int, top: int) -> None:
    home = tempfile.mkdtemp(prefix="ampcap-callgrind-")
    daemon = subprocess.Popen([sys.executable, *SERVE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env={**os.environ, "XDG_CONFIG_HOME": home})
    try:
        assert daemon.stdout is not None
        url = daemon.stdout.readline().split()[0]
        outs = []
        for n in (calls // 4, calls):
            out = os.path.join(home, f"client-{n}.out")
            subprocess.run([*_valgrind(out, True), sys.executable, "-c", _CLIENT, url, str(n)], check=True,
                           stderr=subprocess.DEVNULL, env={**os.environ, "XDG_CONFIG_HOME": home})
            outs.append(out)
        small, big = (_totals(o) for o in outs)
        sign_small, _ = _inclusive(outs[0], 0)
        sign_big, rows = _inclusive(outs[1], top)
        n = calls - calls // 4
        per = (big - small) / n
        crypto = (sign_big - sign_small) / n
        print(f"client (Python API), 1 in flight: {per / 1e6:.3f}M instructions per invoke, "
              f"{crypto / 1e6:.3f}M of them Ed25519 ({calls // 4} vs {calls} calls)")
        _print_top(rows, calls)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        shutil.rmtree(home, ignore_errors=True)


def _daemon_calls(manifest: str, capability: str, calls: int) -> float:
    """Instructions per sequential invoke of ``capability`` in ``serve --manifest``."""
    home = tempfile.mkdtemp(prefix="ampcap-callgrind-")
    out = os.path.join(home, "callgrind.out")
    Path(home, "bench.toml").write_text(manifest)
    argv = ["-m", "ampcap.cli.main", "serve", "--manifest", os.path.join(home, "bench.toml"), "--listen",
            "127.0.0.1:0", "--state-dir", "none"]
    proc = subprocess.Popen([*_valgrind(out, False), sys.executable, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "XDG_CONFIG_HOME": home})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[0]

        async def drive() -> None:
            from ampcap.net.api.peer import connect

            async with connect(url) as remote:
                for i in range(20):  # warm-up: the MCP session, imports, caches
                    await remote.invoke(capability, params={"a": i, "b": 1})
                subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
                for i in range(calls):
                    await remote.invoke(capability, params={"a": i, "b": 1})
                subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)

        trio.run(drive)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        return _totals(out) / calls
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


_DIRECT = """
import os, sys, trio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
async def main(server, calls):
    params = StdioServerParameters(command=sys.executable, args=[server])
    async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write), \\
            ClientSession(read, write) as session:
        await session.initialize()
        for i in range(calls):
            await session.call_tool("add", {"a": i, "b": 1})
trio.run(main, sys.argv[1], int(sys.argv[2]))
"""


def profile_binding(calls: int) -> None:
    import bench_bindings

    binding = _daemon_calls(bench_bindings.MANIFEST, bench_bindings.CAPABILITY, calls)
    plain = _daemon_calls(bench_bindings.MANIFEST, bench_bindings.PLAIN, calls)
    home = tempfile.mkdtemp(prefix="ampcap-callgrind-")
    try:
        totals = []
        for n in (calls // 4, calls):
            out = os.path.join(home, f"direct-{n}.out")
            subprocess.run([*_valgrind(out, True), sys.executable, "-c", _DIRECT, str(bench_bindings.SERVER),
                            str(n)], check=True, stderr=subprocess.DEVNULL)
            totals.append(_totals(out))
        direct = (totals[1] - totals[0]) / (calls - calls // 4)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"MCP binding call, in the daemon: {binding / 1e6:.3f}M instructions; plain invoke, same daemon: "
          f"{plain / 1e6:.3f}M; the SDK's tools/call in a client: {direct / 1e6:.3f}M")
    print(f"the binding's own share (binding - plain - direct): {(binding - plain - direct) / 1e6:.3f}M instructions "
          "per call")


def report(label: str, out: str, calls: int, top: int) -> None:
    total = _totals(out)
    crypto, rows = _inclusive(out, top)
    print(f"{label}: {calls} invokes, {total / calls / 1e6:.3f}M instructions per invoke, "
          f"{crypto / calls / 1e6:.3f}M of them Ed25519 (sign + verify, inclusive)")
    _print_top(rows, calls)


def _print_top(rows: list[tuple[int, str]], calls: int) -> None:
    for n, name in rows:
        print(f"  {n / calls / 1e3:10,.1f}k/invoke  {name[:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=("daemon", "client", "binding"), default="daemon")
    parser.add_argument("--connections", type=int, default=1, help="daemon: unbatched connections")
    parser.add_argument("--seconds", type=float, default=20.0, help="daemon: instrumented run (valgrind is ~50× slower)")
    parser.add_argument("--calls", type=int, default=200, help="client, binding: calls (in the longer run)")
    parser.add_argument("--top", type=int, default=0, help="print the N costliest functions (inclusive)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    t0 = time.perf_counter()
    if args.side == "daemon":
        profile_daemon(args.connections, args.seconds, args.top)
    elif args.side == "binding":
        profile_binding(args.calls)
    else:
        profile_client(args.calls, args.top)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
