"""What is wrong with a manifest, and where: :class:`ManifestProblem` (file,
capability, key, line), :class:`ManifestError` (4001 carrying them all), and
the collector the manifest readers report through, which locates each
problem in the TOML text.

Split out of :mod:`ampcap.caps.manifest`, which re-exports the public names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import AmpError

__all__ = ["ManifestProblem", "ManifestError", "LineFinder", "Collector"]


@dataclass(frozen=True, slots=True)
class ManifestProblem:
    """One thing wrong with a manifest, located as precisely as possible."""

    file: str
    message: str
    capability: str | None = None  # "capability[2] (org.x.y:1.0.0)"
    key: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        parts = [where]
        if self.capability:
            parts.append(self.capability)
        if self.key:
            parts.append(f"key '{self.key}'")
        return ": ".join(parts) + f": {self.message}"


class ManifestError(AmpError):
    """A manifest that cannot be used; ``problems`` lists every finding."""

    def __init__(self, problems: list[ManifestProblem]) -> None:
        first = str(problems[0]) if problems else "invalid manifest"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(4001, first + more, details=[str(p) for p in problems])
        self.problems = tuple(problems)


class LineFinder:
    """Best-effort line numbers: tomllib reports lines only for syntax
    errors, so semantic problems are located by scanning the text."""

    _HEADER = re.compile(r"^\s*\[\[\s*capability\s*\]\]")

    def __init__(self, text: str | None) -> None:
        self.lines = text.splitlines() if text else []
        self.starts = [i for i, line in enumerate(self.lines) if self._HEADER.match(line)]

    def find(self, index: int | None, key: str | None) -> int | None:
        if not self.lines:
            return None
        if index is None and key is not None and key.startswith("mcp_server."):
            # [mcp_server.NAME] tables may stand anywhere: find the table, then the key in it.
            name = key.split(".")[1]
            header = re.compile(rf"^\s*\[\s*mcp_server\.{re.escape(name)}\s*\]")
            top = next((i for i, line in enumerate(self.lines) if header.match(line)), None)
            if top is None:
                return None
            leaf = key.split(".")[-1]
            end = next((i for i in range(top + 1, len(self.lines)) if self.lines[i].lstrip().startswith("[")),
                       len(self.lines))
            assign = re.compile(rf"^\s*{re.escape(leaf)}\s*=")
            return next((i + 1 for i in range(top, end) if assign.match(self.lines[i])), top + 1)
        if index is None:
            lo, hi = 0, (self.starts[0] if self.starts else len(self.lines))
        elif index < len(self.starts):
            lo = self.starts[index]
            hi = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.lines)
        else:
            return None
        if key is None:
            return lo + 1
        # The key's own line, else its table's ('binding.command' inside an
        # inline table `binding = { command = [...] }` is on the binding line).
        for leaf in reversed(key.split(".")):
            pattern = re.compile(rf"^\s*(?:{re.escape(leaf)}\s*=|\[\s*capability\.(?:[\w.]+\.)?{re.escape(leaf)}\s*\])")
            for i in range(lo, hi):
                if pattern.match(self.lines[i]):
                    return i + 1
        return lo + 1 if index is not None else None


class Collector:
    def __init__(self, source: str, text: str | None) -> None:
        self.source = source
        self.lines = LineFinder(text)
        self.problems: list[ManifestProblem] = []

    def add(self, message: str, *, index: int | None = None, label: str | None = None, key: str | None = None) -> None:
        cap = None
        if index is not None:
            cap = f"capability[{index}]" + (f" ({label})" if label else "")
        self.problems.append(ManifestProblem(self.source, message, cap, key, self.lines.find(index, key)))
