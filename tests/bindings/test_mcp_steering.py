"""MCP both ways through the binding (R17 + R23), with a real MCP SDK
server over stdio: its elicitation becomes AMP INPUT_REQUIRED to the caller
and the answer (or the refusal) goes back; its progress without a total
reaches the caller (pct None); an AMP cancel of the invoke cancels the MCP
request (notifications/cancelled)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

pytest.importorskip("mcp")

sys.path.insert(0, str(Path(__file__).parent))
from binding_helpers import build, capability, serving, stdio_server  # noqa: E402

CONFIRM = capability("confirm", '[capability.binding.mcp]\nserver = "tools"\ntool = "confirm"\n')
UNKNOWN = capability("unknown-total", '[capability.binding.mcp]\nserver = "tools"\ntool = "unknown_total"\n')
SLOW = capability("slow", '[capability.binding.mcp]\nserver = "tools"\ntool = "slow"\ntimeout_ms = 60000\n')


@pytest.mark.trio
async def test_elicitation_progress_without_total_and_cancel(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    manifest = build(tmp_path, stdio_server(marks=marks) + CONFIRM + UNKNOWN + SLOW)
    async with serving(manifest) as (server, remote):
        asked: list = []

        def on_input(prompt: str, options: object) -> str:
            asked.append((prompt, options))
            return "blue"

        got = await remote.invoke("org.example.confirm:1.0.0", params={"question": "Which colour?"},
                                  on_input=on_input)
        assert got == {"action": "accept", "answer": "blue"} and asked == [("Which colour?", None)]
        # The caller declines: the server hears "decline".
        got = await remote.invoke("org.example.confirm:1.0.0", params={"question": "Which colour?"},
                                  on_input=lambda prompt, options: None)
        assert got == {"action": "decline"}

        seen: list = []
        got = await remote.invoke("org.example.unknown-total:1.0.0", params={"steps": 3},
                                  on_progress=lambda pct, text: seen.append((pct, text)))
        assert got == {"total": 3}
        assert seen == [(None, "step 1 of ?"), (None, "step 2 of ?"), (None, "step 3 of ?")]

        # Cancelled by its caller: the MCP request is cancelled at the server.
        with trio.move_on_after(1.0):
            await remote.invoke("org.example.slow:1.0.0", params={"ms": 30_000, "tag": "c"})
        with trio.fail_after(10):
            while not (marks / "cancelled-c").exists():
                await trio.sleep(0.05)
