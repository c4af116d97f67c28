"""Example capability implementations for examples/manifest.toml.

Run ``ampcap serve --manifest examples/manifest.toml`` from the repository
root (so that ``examples`` is importable) or put this module on PYTHONPATH.
"""

from __future__ import annotations

from typing import Any

GREETINGS = {"en": "Hello", "fr": "Bonjour", "de": "Hallo"}


def greet(params: dict[str, Any]) -> dict[str, Any]:
    """A plain function: runs in a worker thread."""
    word = GREETINGS[params.get("language", "en")]
    return {"greeting": f"{word}, {params['name']}!"}


async def countdown(params: dict[str, Any], context: Any) -> dict[str, Any]:
    """An async function taking the invocation context: reports progress."""
    n = params["from"]
    for i in range(n, 0, -1):
        await context.progress(100.0 * (n - i) / n, f"{i}…")
        await context.sleep(100)
    return {"done": True}
