"""The layering of docs/architecture.md, checked on the import statements:
the sans-I/O packages never import the trio edge (or trio, or sockets), and
each imports only from the layers below it, so there are no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "ampcap"

# Package → the ampcap packages and top-level modules it may import from.
_COMMON = {"errors", "display", "loaders", "outputs", "_lazy", "__init__"}
ALLOWED = {
    "wire": {"wire"} | _COMMON,
    "schema": {"schema", "wire"} | _COMMON,
    "caps": {"caps", "schema", "wire"} | _COMMON,
    "peer": {"peer", "caps", "schema", "wire"} | _COMMON,
    "dump": {"dump", "caps", "schema", "wire"} | _COMMON,
}
FORBIDDEN_LIBRARIES = {"trio", "socket", "asyncio", "selectors"}  # (threading.local is no I/O)


def _imports(path: Path) -> list[tuple[str, int]]:
    """(what, line) for every import: ampcap modules as 'ampcap.<pkg>…', others by top-level name."""
    tree = ast.parse(path.read_text(), str(path))
    package = path.relative_to(SRC.parent).with_suffix("").parts[:-1]  # ('ampcap', 'peer')
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, node.lineno))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_the_sans_io_packages_import_only_from_below(package: str) -> None:
    wrong = []
    for path in sorted((SRC / package).rglob("*.py")):
        for module, line in _imports(path):
            parts = module.split(".")
            if parts[0] == "ampcap":
                target = parts[1] if len(parts) > 1 else "__init__"
                if target not in ALLOWED[package]:
                    wrong.append(f"{path.relative_to(SRC)}:{line} imports {module}")
            elif parts[0] in FORBIDDEN_LIBRARIES:
                wrong.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    assert wrong == []
