"""``ampcap session`` and ``ampcap invoke --session/--answer`` against a real
``ampcap serve``: open with a pin, invoke inside (the pinned version runs),
answer INPUT_REQUIRED from --answer, a clear failure without a terminal,
close; usage mistakes exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "net"))
from amp_helpers import serve_process  # noqa: E402

ECHO = "org.ampcap.demo.echo"


def _ampcap(tmp: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "client-config"))
    return subprocess.run([sys.executable, "-m", "ampcap.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=60, input=stdin)


def _manifest(tmp: Path) -> Path:
    path = tmp / "confirm.toml"
    path.write_text("""
[[capability]]
name = "org.test.confirm"
version = "1.0.0"
input_schema = { type = "object" }
output_schema = { type = "object" }
binding = { python = "ampcap.caps.demo:confirm" }
""")
    return path


def test_session_open_invoke_pinned_and_close(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--manifest", str(_manifest(tmp_path))) as proc:
        opened = _ampcap(tmp_path, "session", proc.url, "open", "--pin", f"{ECHO}={ECHO}:1.1.0", "--json")
        assert opened.returncode == 0, opened.stderr
        state = json.loads(opened.stdout)
        assert state["status"] == "active" and state["pinned"] == {ECHO: f"{ECHO}:1.1.0"}
        sid = state["session_id"]
        ran = _ampcap(tmp_path, "invoke", proc.url, ECHO, "--session", sid, "--params", '{"message": "hi"}', "--json")
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["result"] == {"message": "hi", "version": "1.1.0"}
        other = _ampcap(tmp_path, "invoke", proc.url, f"{ECHO}:2.0.0", "--session", sid, "--params",
                        '{"message": "hi"}')
        assert other.returncode == 1 and "4003" in other.stderr
        closed = _ampcap(tmp_path, "session", proc.url, "close", sid)
        assert closed.returncode == 0 and "closed" in closed.stdout
        again = _ampcap(tmp_path, "invoke", proc.url, ECHO, "--session", sid, "--params", '{"message": "hi"}')
        assert again.returncode == 1 and "4001" in again.stderr


def test_invoke_answers_questions_or_fails_clearly(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--manifest", str(_manifest(tmp_path))) as proc:
        params = '{"question": "Ship it?", "options": ["yes", "no"]}'
        answered = _ampcap(tmp_path, "invoke", proc.url, "org.test.confirm:1.0.0", "--params", params,
                           "--answer", "yes", "--json")
        assert answered.returncode == 0, answered.stderr
        assert json.loads(answered.stdout) == {"result": {"answer": "yes"}}
        assert "Ship it?" in answered.stderr
        piped = _ampcap(tmp_path, "invoke", proc.url, "org.test.confirm:1.0.0", "--params", params, stdin="yes\n")
        assert piped.returncode == 1
        assert "stdin is not a terminal" in piped.stderr and "error 4001" in piped.stderr
        assert "Traceback" not in piped.stderr


def test_session_usage_mistakes_exit_2(tmp_path: Path) -> None:
    for args in (["session", "amp://127.0.0.1:9", "close"], ["session", "amp://127.0.0.1:9", "open", "abcd"],
                 ["session", "amp://127.0.0.1:9", "resume", "xyz"],
                 ["session", "amp://127.0.0.1:9", "open", "--pin", "nonsense"],
                 ["invoke", "amp://127.0.0.1:9", ECHO, "--session", "12"],
                 ["invoke", "amp://127.0.0.1:9", ECHO, "--session", "00" * 16, "--retry"]):
        result = _ampcap(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_invoke_asks_on_a_terminal(tmp_path: Path) -> None:
    import pty
    import select

    with serve_process(tmp_path, "--manifest", str(_manifest(tmp_path))) as proc:
        master, slave = pty.openpty()
        env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "client-config"))
        child = subprocess.Popen([sys.executable, "-m", "ampcap.cli.main", "invoke", proc.url,
                                  "org.test.confirm:1.0.0", "--params",
                                  '{"question": "Ship it?", "options": ["yes", "no"]}', "--json"],
                                 stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        os.close(slave)
        try:
            # The question goes to stderr; answer "2" (the second option) on the terminal.
            seen = b""
            deadline = 30.0
            while b"answer>" not in seen and deadline > 0:
                readable, _, _ = select.select([child.stderr], [], [], 0.5)
                deadline -= 0.5
                if readable:
                    seen += os.read(child.stderr.fileno(), 4096)
            assert b"Ship it?" in seen and b"yes / no" in seen
            os.write(master, b"2\n")
            out, err = child.communicate(timeout=30)
        finally:
            os.close(master)
            if child.poll() is None:
                child.kill()
        assert child.returncode == 0, err
        assert json.loads(out) == {"result": {"answer": "no"}}


def test_a_session_and_its_pins_survive_kill_9(tmp_path: Path) -> None:
    import signal

    state = str(tmp_path / "state")
    with serve_process(tmp_path, "--state-dir", state) as first:
        opened = _ampcap(tmp_path, "session", first.url, "open", "--pin", f"{ECHO}={ECHO}:1.0.0", "--json")
        assert opened.returncode == 0, opened.stderr
        sid = json.loads(opened.stdout)["session_id"]
        first.proc.send_signal(signal.SIGKILL)  # the accept was sent: the record was committed before it
        first.proc.wait(10)
    with serve_process(tmp_path, "--state-dir", state) as second:
        resumed = _ampcap(tmp_path, "session", second.url, "resume", sid, "--json")
        assert resumed.returncode == 0, resumed.stderr
        state_after = json.loads(resumed.stdout)
        assert state_after["status"] == "active" and state_after["pinned"] == {ECHO: f"{ECHO}:1.0.0"}
        ran = _ampcap(tmp_path, "invoke", second.url, ECHO, "--session", sid, "--params", '{"message": "x"}',
                      "--json")
        assert json.loads(ran.stdout)["result"]["version"] == "1.0.0"
