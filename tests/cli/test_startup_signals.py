"""Signals while a command starts: Ctrl-C during the import of the command
line exits 130 without a traceback, and SIGTERM/SIGINT/SIGHUP before serve
is serving stop it with 0 (README: they drain serve and it exits 0; there is
nothing to drain yet). Before, these ended in a traceback, or with 143, 130
or 129."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Runs the console entry point with a hook that sends this process SIGNAL
# while MODULE is being imported: a signal landing at exactly that moment of
# start-up, every time.
SIGNAL_DURING_IMPORT = """
import os, signal, sys

module, signum = sys.argv[1], getattr(signal, sys.argv[2])


class SignalOnImport:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == module:
            sys.meta_path.remove(SignalOnImport)
            os.kill(os.getpid(), signum)
        return None


sys.meta_path.insert(0, SignalOnImport)
sys.argv = ["ampcap", *sys.argv[3:]]
from ampcap.cli.entry import run
sys.exit(run())
"""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _as_a_terminal_starts_it() -> None:
    # A child inherits ignored signals and the signal mask: a suite started in
    # the background (`cmd &` in a script ignores SIGINT, nohup ignores SIGHUP)
    # would hand that on, and the signal under test would never arrive. A
    # command typed at a terminal starts with them at their defaults.
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _run_signalled(tmp_path: Path, module: str, signame: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    return subprocess.run([sys.executable, "-c", SIGNAL_DURING_IMPORT, module, signame, *argv],
                          capture_output=True, text=True, env=env, timeout=60,
                          preexec_fn=_as_a_terminal_starts_it)


@pytest.mark.parametrize("argv", [["query", "amp://127.0.0.1:9", "echo"], ["keygen", "--out", "-"]])
def test_ctrl_c_while_the_command_line_imports_exits_130_quietly(tmp_path: Path, argv: list[str]) -> None:
    done = _run_signalled(tmp_path, "ampcap.cli.main", "SIGINT", *argv)
    assert done.returncode == 130
    assert done.stderr == "" and done.stdout == ""


SERVE = ["serve", "--demo", "--listen", "127.0.0.1:0"]


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
@pytest.mark.parametrize("module", [
    "ampcap.cli.main",    # the console entry point imports the command line
    "ampcap.cli.serve",   # the parser imports the subcommands
    "ampcap.net.daemon.core",  # serve builds its daemon
    "trio",               # serve starts its event loop (trio's first import is there)
])
def test_a_stop_signal_while_serve_starts_exits_0_without_serving(tmp_path: Path, module: str,
                                                                   signame: str) -> None:
    done = _run_signalled(tmp_path, module, signame, *SERVE)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # no URL line: it never listened
    assert "Traceback" not in done.stderr


def _catches(pid: int, signum: int) -> bool:
    """Has process ``pid`` a handler for ``signum`` (/proc/PID/status SigCgt)?"""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see when handlers are in place")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_serve_signalled_as_soon_as_it_can_take_signals_exits_0(tmp_path: Path, signum: int) -> None:
    # Python itself catches SIGINT from the start, so wait for SIGTERM's
    # handler: the first thing ampcap's own code installs.
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.Popen([sys.executable, "-m", "ampcap", *SERVE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_as_a_terminal_starts_it)
    try:
        deadline = time.monotonic() + 30
        while not _catches(proc.pid, signal.SIGTERM):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.001)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
