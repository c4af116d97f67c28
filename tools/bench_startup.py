"""How long one `ampcap invoke` takes from the shell, against importing its libraries.

A one-shot command pays for the interpreter, its imports and the work itself
every time. This times, in alternating runs on the same machine:

* baseline: ``python -c "import trio, cbor2, nacl.signing"`` (the event loop,
  the CBOR codec and Ed25519: what any AMP client in Python must load);
* ``ampcap invoke URL org.ampcap.demo.math.add:1.0.0`` against an
  ``ampcap serve --demo`` this script starts (dial, HANDSHAKE, HELLO, one
  signed invoke and its verified reply, the output printed);
* ``ampcap --help``.

Both wall time and CPU time (user + system of the child) are reported, as
medians; CPU time moves less on a busy machine. Bytecode is written during a
warm-up run (PYTHONDONTWRITEBYTECODE is cleared for the children), so what
is measured is a user's second and later calls. Target (issue 26): invoke at
most 1.5x the baseline.

    python tools/bench_startup.py [--runs 15] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = "import trio, cbor2, nacl.signing"


def _ampcap() -> list[str]:
    script = Path(sys.executable).with_name("ampcap")  # the console script a user runs
    return [str(script)] if script.exists() else [sys.executable, "-m", "ampcap"]


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each command (default 15)")
    parser.add_argument("--quick", action="store_true", help="3 runs each (a smoke test)")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else max(args.runs, 1)

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["XDG_CONFIG_HOME"] = str(Path(tmp) / "server-config")
        server = subprocess.Popen([*_ampcap(), "serve", "--demo", "--listen", "127.0.0.1:0"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split()[0]
            client_env = dict(env, XDG_CONFIG_HOME=str(Path(tmp) / "client-config"))
            key = str(Path(tmp) / "caller.key")
            subprocess.run([*_ampcap(), "keygen", "--out", key], env=client_env, capture_output=True, check=True)
            commands = {
                "baseline: python -c '" + BASELINE + "'": [sys.executable, "-c", BASELINE],
                "ampcap invoke (demo math.add)": [*_ampcap(), "invoke", url, "org.ampcap.demo.math.add:1.0.0",
                                                  "--params", '{"a": 2, "b": 40}', "--identity", key],
                "ampcap --help": [*_ampcap(), "--help"],
            }
            for argv_ in commands.values():  # warm-up: bytecode written, caches filled
                _timed(argv_, client_env)
            walls: dict[str, list[float]] = {name: [] for name in commands}
            cpus: dict[str, list[float]] = {name: [] for name in commands}
            names = list(commands)
            for i in range(runs):
                order = names if i % 2 == 0 else names[::-1]  # alternate, so drift hits all alike
                for name in order:
                    wall, cpu = _timed(commands[name], client_env)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        finally:
            server.terminate()
            server.wait(30)

    print(f"{runs} runs each, alternating, on {os.cpu_count()} CPUs (medians; range in brackets)")
    print(f"{'command':<52} {'wall ms':>18} {'CPU ms':>18}")
    for name in names:
        w, c = walls[name], cpus[name]
        print(f"{name:<52} {statistics.median(w) * 1000:7.0f} [{min(w) * 1000:.0f}-{max(w) * 1000:.0f}]"
              f" {statistics.median(c) * 1000:7.0f} [{min(c) * 1000:.0f}-{max(c) * 1000:.0f}]")
    base, invoke = names[0], names[1]
    wall_ratio = statistics.median(walls[invoke]) / statistics.median(walls[base])
    cpu_ratio = statistics.median(cpus[invoke]) / statistics.median(cpus[base])
    print(f"invoke / baseline: wall {wall_ratio:.2f}x, CPU {cpu_ratio:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
