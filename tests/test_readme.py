"""The README: its set-up commands (the test command is the one CI runs, so the
two must not drift), its Python example and its links."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].rstrip().endswith("ampcap serve --demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    test_command = _readme_commands()[1]
    # The pytest invocation at the end of the README command is what CI runs.
    pytest_part = test_command.split("&& ")[-1].replace(".venv/bin/python", ".venv/bin/python")
    ci = (ROOT / ".ci" / "run").read_text()
    assert pytest_part in ci
    assert "pip install --quiet -e '.[test]'" in ci


def test_readme_python_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.+?)```", text, re.S)
    assert len(blocks) == 1
    done = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "{'greeting': 'Hello, Ada'}\n"
    assert done.stderr == ""


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    targets = set(re.findall(r"\]\(((?:docs|examples)/[^)#]+)", text))
    assert {"docs/cli.md", "docs/python-api.md", "docs/performance.md", "docs/conformance.md"} <= targets
    for target in targets:
        assert (ROOT / target).is_file(), target
    assert "https://github.com/agentries/rfcs" in text


def _tour_block() -> list[str]:
    tour = (ROOT / "README.md").read_text().split("## A short tour", 1)[1]
    block = re.findall(r"```sh\n(.+?)\n```", tour, re.S)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("source ")]


def test_the_tour_runs_as_written_and_nothing_warns(tmp_path: Path) -> None:
    """The README's first commands against `ampcap serve --demo`, as a
    newcomer runs them: each exits 0, and neither side logs a warning
    (a deprecated alias did, issue 26). No key to make first: the caller's
    default (caller.json) is its own, apart from the daemon's."""
    sys.path.insert(0, str(ROOT / "tests" / "net"))
    from amp_helpers import serve_process

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               XDG_CONFIG_HOME=str(tmp_path / "caller-config"))
    (tmp_path / "server").mkdir()
    with serve_process(tmp_path / "server") as daemon:
        port = daemon.url.rsplit(":", 1)[1]
        lines = _tour_block()
        assert any("ossa:" in line for line in lines)
        for line in lines:
            command = line.replace("127.0.0.1:7700", f"127.0.0.1:{port}")
            done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, (line, done.stderr)
            assert "warning" not in done.stderr.lower() and "deprecated" not in done.stderr, (line, done.stderr)
        assert daemon.terminate() == 0
        logged = daemon.stderr()
    assert "WARNING" not in logged and "deprecated" not in logged, logged
