"""The shell examples in README.md and docs/ that are marked runnable run,
as written, and succeed (issue 38 item 14).

The marker is an HTML comment on the line before a ```sh block (invisible
on a rendered page)::

    <!-- runnable -->                      the block alone, in an empty directory
    <!-- runnable: demo-daemon -->         with `ampcap serve --demo` at 127.0.0.1:7700
    <!-- runnable: demo-daemon caller-key -->   ... and caller.key, the tour's caller

Each block runs in bash (``set -e``) in a fresh temporary directory with a
fresh HOME (so the default identity, ~/.config/ampcap/identity.json, is a new
one), this checkout's ``ampcap`` first on PATH, and ``examples/`` and
``tools/`` linked in. A ``127.0.0.1:PORT`` in the block is moved to a free
port (the same one everywhere in the block), so blocks never meet other
programs on the machine; after a line that starts a daemon in the background
(``… &``), the next line waits until its ``--listen`` port accepts, as a
person reading the output would. Whatever the block left running is stopped
at the end. Lines are checked, not their output: a block is a tutorial, and
its comments say what to expect.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- runnable(?::\s*(?P<options>[a-z\- ]*))? -->\n```sh\n(?P<body>.*?)\n```", re.M | re.S)
OPTIONS = frozenset({"demo-daemon", "caller-key"})
DEMO_PORT = 7700


@dataclass(frozen=True)
class Block:
    source: str  # file:line
    options: frozenset[str]
    body: str

    def __str__(self) -> str:
        return self.source


def marked_blocks() -> list[Block]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in MARKER.finditer(text):
            options = frozenset((m.group("options") or "").split())
            line = text.count("\n", 0, m.start()) + 1
            found.append(Block(f"{doc.relative_to(ROOT)}:{line}", options, m.group("body")))
    return found


BLOCKS = marked_blocks()


def test_markers_are_well_formed() -> None:
    # A marker not followed by a ```sh block, or with an unknown option, would
    # silently run nothing.
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        markers = len(re.findall(r"^<!-- runnable", text, re.M))  # a marker starts its line (prose may name one)
        parsed = [b for b in BLOCKS if b.source.startswith(f"{doc.relative_to(ROOT)}:")]
        assert markers == len(parsed), f"{doc}: a runnable marker not directly before a ```sh block"
        for block in parsed:
            assert block.options <= OPTIONS, f"{block}: unknown options {sorted(block.options - OPTIONS)}"
    assert len(BLOCKS) >= 4  # the README's tour, delegation and conformance blocks, docs/sessions.md


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _environment(tmp: Path) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir()
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    ampcap = bin_dir / "ampcap"
    ampcap.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ampcap.cli.main "$@"\n')
    ampcap.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "AMPCAP_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1",
               PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


def _wait_helper() -> str:
    # Used after a line ending in "&": wait (at most 30 s) until PORT accepts.
    return ('_await_listen() { for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; '
            'sleep 0.1; done; echo "nothing listens on port $1" >&2; return 1; }\n')


def script_for(block: Block, ports: dict[int, int]) -> str:
    """The block as bash runs it: ports moved, a wait after each daemon started with '&'."""
    def moved(m: re.Match[str]) -> str:
        return f"127.0.0.1:{ports.setdefault(int(m.group(1)), _free_port())}"

    lines = ["set -eo pipefail", _wait_helper()]
    for line in re.sub(r"\\\n", " ", block.body).splitlines():
        if line.startswith("source .venv/"):
            continue  # the harness's PATH is the activated environment
        line = re.sub(r"127\.0\.0\.1:(\d+)", moved, line)
        lines.append(line)
        command = line.split("#", 1)[0].rstrip()
        if command.endswith("&") and not command.endswith("&&"):
            listen = re.search(r"--listen 127\.0\.0\.1:(\d+)", command)
            assert listen is not None, f"{block}: a daemon started with & needs --listen 127.0.0.1:PORT: {line}"
            lines.append(f"_await_listen {listen.group(1)}")
    return "\n".join(lines) + "\n"


def _stop_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_marked_block_runs(block: Block, tmp_path: Path) -> None:
    for program in ("jq",):
        if re.search(rf"\b{program}\b", block.body) and shutil.which(program) is None:
            pytest.skip(f"{block} uses {program}, which is not installed")
    work = tmp_path / "work"
    work.mkdir()
    for name in ("examples", "tools"):
        (work / name).symlink_to(ROOT / name)
    env = _environment(tmp_path)
    ports: dict[int, int] = {}
    daemon = None
    daemon_log = None
    try:
        if "caller-key" in block.options:
            subprocess.run(["ampcap", "keygen", "--out", "caller.key"], cwd=work, env=env, check=True,
                           capture_output=True, timeout=60)
        if "demo-daemon" in block.options:
            ports[DEMO_PORT] = _free_port()
            daemon_log = open(tmp_path / "daemon.err", "w")  # noqa: SIM115 - closed in finally
            daemon = subprocess.Popen(["ampcap", "serve", "--demo", "--listen", f"127.0.0.1:{ports[DEMO_PORT]}"],
                                      cwd=work, env=env, stdout=subprocess.PIPE, stderr=daemon_log,
                                      text=True, start_new_session=True)
            assert daemon.stdout is not None
            assert daemon.stdout.readline().startswith("amp://"), "the demo daemon did not start"
        script = script_for(block, ports)
        # Files, not pipes: a daemon the block leaves running holds its output open.
        with open(tmp_path / "out", "w") as out_file, open(tmp_path / "err", "w") as err_file:
            run = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, stdout=out_file, stderr=err_file,
                                   text=True, start_new_session=True)
            try:
                run.wait(timeout=180)
            finally:
                _stop_group(run)  # daemons the block started with &
        out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
        assert run.returncode == 0, f"{block} failed ({run.returncode}):\n{script}\nstdout:\n{out}\nstderr:\n{err}"
        # As a newcomer runs them, nothing warns (a deprecated alias did, issue 26).
        assert "Traceback" not in err and "warning" not in err.lower() and "deprecated" not in err, err
    finally:
        if daemon is not None:
            _stop_group(daemon)
            daemon.wait(timeout=30)
        if daemon_log is not None:
            daemon_log.close()
    if daemon is not None:
        logged = (tmp_path / "daemon.err").read_text()
        assert "WARNING" not in logged and "deprecated" not in logged and "Traceback" not in logged, logged
