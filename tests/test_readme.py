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


# The tour, and every other shell block marked runnable, is run by
# tests/test_doc_blocks.py (which also checks that nothing warns).


def test_readme_and_bindings_doc_quote_the_same_binding_cost() -> None:
    # Issue 38 item 14: they gave figures from different runs.
    readme = (ROOT / "README.md").read_text().split("## Bindings", 1)[1].split("\n## ", 1)[0]
    doc = (ROOT / "docs" / "bindings.md").read_text().split("## Cost", 1)[1]
    figures = re.findall(r"\d[\d,]*(?:\.\d+)? µs|\d+\.\d+x", readme)
    assert len(figures) >= 4, readme
    for figure in figures:
        assert figure in doc, f"README's binding cost {figure!r} is not in docs/bindings.md"
