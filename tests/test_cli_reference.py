"""docs/cli.md documents every command and option (issue 38 item 13).

Its reference part is generated from the argparse parsers by
tools/gen_cli_reference.py; a command or option added without rerunning the
generator fails here, with the command that fixes it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
REGENERATE = "PYTHONPATH=src python tools/gen_cli_reference.py"

sys.path.insert(0, str(ROOT / "tools"))
import gen_cli_reference  # noqa: E402


def test_the_generated_reference_is_current() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_cli_reference.py"), "--check"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, (
        f"docs/cli.md's reference is not what the parsers say (a command or option was added or its help "
        f"changed): run `{REGENERATE}` from the repository root and commit docs/cli.md. {done.stderr}")


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (ampcap [a-z0-9 -]+)\n", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_and_option_appears() -> None:
    # Independent of the generator's output format: walk the parsers here.
    from ampcap.cli.main import build_parser

    sections = _sections(DOC.read_text())
    top = build_parser()
    missing = []
    every = list(gen_cli_reference.commands(top))
    assert {"serve", "query", "invoke", "session", "deleg", "mcp", "caps import-mcp", "dump", "interop",
            "keygen", "id"} <= {" ".join(path) for path, _, _ in every}
    for path, parser, _ in every:
        name = "ampcap " + " ".join(path)
        if name not in sections:
            missing.append(name)
            continue
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:  # kept for old scripts, hidden from --help: not documented
                continue
            for option in action.option_strings:
                if option not in ("-h", "--help") and f"`{option}" not in sections[name] \
                        and f", {option}" not in sections[name]:
                    missing.append(f"{name} {option}")
    assert not missing, f"not in docs/cli.md: {', '.join(missing)}; run `{REGENERATE}`"
    for option in ("--http", "--mcp", "--state-dir"):
        assert f"`{option} " in sections["ampcap serve"]


def test_the_prose_is_whole() -> None:
    """The page once had sentences cut mid-way and a section starting
    mid-sentence: every prose paragraph starts as a sentence does and ends
    with its punctuation."""
    text = DOC.read_text().split(gen_cli_reference.BEGIN)[0]
    text = re.sub(r"^```.*?^```\n", "", text, flags=re.M | re.S)  # code blocks
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph or paragraph.startswith(("#", "-", "|", "<!--")):
            continue
        assert not paragraph[0].islower(), f"a paragraph starts mid-sentence: {paragraph[:80]!r}"
        assert paragraph[-1] in ".:)", f"a paragraph ends mid-sentence: {paragraph[-80:]!r}"
