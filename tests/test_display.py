"""ampcap.display: a peer's text shown without its control characters."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ampcap.display import PEER_TEXT_LIMIT, json_safe, printable, quoted, shown

UNSAFE = [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), "\u061c", "\u200e", "\u200f",
          *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))]


def test_printable_escapes_controls_and_bidi_and_keeps_other_text() -> None:
    assert printable("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert printable("\x1b[31m\x07\x7f\x9b") == "\\x1b[31m\\x07\\x7f\\x9b"
    assert printable("\u202eabc\u2066") == "\\u202eabc\\u2066"
    assert printable("café 日本 🚀 \\x41") == "café 日本 🚀 \\x41"


@given(st.text())
def test_printable_output_holds_no_unsafe_character(text: str) -> None:
    shown = printable(text)
    assert not any(c in shown for c in UNSAFE)
    assert len(shown) >= len(text)


@given(st.recursive(st.text() | st.integers() | st.none(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=10))
def test_json_safe_keeps_the_document_and_its_meaning(value: object) -> None:
    document = json_safe(json.dumps(value, ensure_ascii=False, indent=2))
    assert json.loads(document) == value
    assert not any(c in document for c in UNSAFE if c not in "\n")  # indent newlines are JSON's own


def test_printable_shortens_to_a_limit_and_says_how_long() -> None:
    assert printable("abc", limit=5) == "abc"
    assert printable("\x1b" * 10, limit=3) == "\\x1b\\x1b\\x1b… (10 chars)"


def test_shown_and_quoted_cut_a_peers_value_and_say_how_long_it_was() -> None:
    huge = "\x1b" + "a" * 5_000_000
    line = shown(huge)
    assert line.startswith("\\x1baaa") and line.endswith("… (5000001 chars)") and len(line) < PEER_TEXT_LIMIT + 40
    assert shown(12345) == "12345" and shown("short\n") == "short\\n"
    text = quoted(huge)
    assert text.startswith("'\\x1baaa") and text.endswith("'… (5000001 chars)") and len(text) < PEER_TEXT_LIMIT + 40
    assert quoted("it's") == repr("it's") and quoted("\u202e") == "'\\u202e'"
    assert quoted(b"\x00" * 10_000).startswith("b'\\x00") and len(quoted(b"\x00" * 10_000)) < PEER_TEXT_LIMIT + 40


def test_counted_agrees_with_its_noun() -> None:
    from ampcap.display import counted

    assert counted(1, "MCP server") == "1 MCP server"
    assert counted(0, "MCP server") == "0 MCP servers"
    assert counted(2, "capability", "capabilities") == "2 capabilities"
    assert counted(1, "capability", "capabilities") == "1 capability"
