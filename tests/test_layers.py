"""The layering of docs/architecture.md, checked on the source: the sans-I/O
packages never import the trio edge (or trio, or sockets), each imports only
from the layers below it, so there are no cycles, and none of them touches
the file system (that is ampcap.files's job)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "ampcap"

# Package → the ampcap packages and top-level modules it may import from.
_COMMON = {"errors", "display", "decoders", "_lazy", "_version", "__init__"}
ALLOWED = {
    "wire": {"wire"} | _COMMON,
    "schema": {"schema", "wire"} | _COMMON,
    "caps": {"caps", "schema", "wire"} | _COMMON,
    # RFC 005 delegation: pure rules over signed CBOR, beside caps/ (the executor calls it).
    "deleg": {"deleg", "caps", "schema", "wire"} | _COMMON,
    "peer": {"peer", "deleg", "caps", "schema", "wire"} | _COMMON,
    # The relay's wrappers and receipts are read by the relay core's own parsers.
    "dump": {"dump", "relay", "deleg", "caps", "schema", "wire"} | _COMMON,
    # RFC 006 sessions: sans-I/O beside peer/, driven by events like the executor.
    "session": {"session", "peer", "deleg", "caps", "schema", "wire"} | _COMMON,
    # RFC 003 relay: sans-I/O beside peer/; receipts reuse deleg/'s COSE_Sign1.
    "relay": {"relay", "deleg", "wire"} | _COMMON,
    # RFC 007 payments (R26): the payee's engine and the settlement adapters, beside session/.
    "pay": {"pay", "caps", "schema", "wire"} | _COMMON,
    "files": {"files", "relay", "peer", "deleg", "caps", "schema", "wire"} | _COMMON,
    # The durable state store (R19) is the edge beside files/: it implements the
    # narrow state protocols of the core packages over SQLite, and no core package
    # imports it.
    "store": {"store", "files", "peer", "caps", "schema", "wire", "deleg", "session", "relay", "pay"} | _COMMON,
}
SANS_IO = ("wire", "schema", "caps", "deleg", "peer", "session", "dump", "relay", "pay")
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


# What reading or writing files takes: the libraries, and the calls on paths
# (pathlib itself is allowed: a path is a value, only these calls are I/O).
FILE_LIBRARIES = {"os", "shutil", "tarfile", "zipfile", "stat", "tempfile", "glob", "mmap", "fcntl"}
FILE_CALLS = {"open", "read_bytes", "read_text", "write_bytes", "write_text", "exists", "is_file", "is_dir",
              "is_symlink", "stat", "lstat", "mkdir", "iterdir", "glob", "rglob", "unlink", "touch",
              "chmod", "samefile", "cwd", "home"}  # not "replace", "resolve": not only paths have them
# The CDDL engine reads its own package data (cddl/*.cddl), never a user's file.
FILE_EXCEPTIONS = {"schema/__init__.py": {"read_text"}}


# The edge packages that speak other protocols (R17) sit beside net/, never
# above it: the bindings and the MCP client are used by net/, so importing
# net/, the CLI or the interop harness would make a cycle. (mcp/gateway.py,
# the MCP server side, sits above net/ and is not held to this.)
EDGE_RULES = {
    "bindings": ("bindings/*.py", {"net", "cli", "interop"}),
    "mcp": ("mcp/[!g]*.py", {"net", "cli", "interop", "bindings"}),
}


@pytest.mark.parametrize("package", sorted(EDGE_RULES))
def test_the_binding_packages_never_import_net_cli_or_interop(package: str) -> None:
    pattern, forbidden = EDGE_RULES[package]
    wrong = []
    paths = sorted(SRC.glob(pattern))
    assert paths
    for path in paths:
        for module, line in _imports(path):
            parts = module.split(".")
            if parts[0] == "ampcap" and len(parts) > 1 and parts[1] in forbidden:
                wrong.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    assert wrong == []


def test_mcp_libraries_load_lazily() -> None:
    """``ampcap --help``, ``serve --demo`` and the sans-I/O layers never import
    the MCP SDK, httpx or grpc (the packages import them inside functions).
    The gateway's modules (mcp/gateway*.py) are the exception: they are the
    MCP server, only ever imported on demand (``ampcap mcp``, ``ampcap.mcp.gateway``)."""
    heavy = {"mcp", "mcp_types", "httpx", "httpx2", "grpc", "google", "pydantic", "anyio"}
    wrong = []
    for path in sorted([*SRC.glob("bindings/*.py"), *SRC.glob("mcp/[!g]*.py"), *SRC.glob("net/**/*.py"),
                        *SRC.glob("cli/*.py"), *SRC.glob("caps/**/*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:  # module level only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            wrong += [f"{path.relative_to(SRC)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in heavy]
    assert wrong == []


@pytest.mark.parametrize("package", SANS_IO)
def test_the_sans_io_packages_touch_no_files(package: str) -> None:
    wrong = []
    for path in sorted((SRC / package).rglob("*.py")):
        name = str(path.relative_to(SRC))
        allowed = FILE_EXCEPTIONS.get(name, set())
        for module, line in _imports(path):
            if module.split(".")[0] in FILE_LIBRARIES:
                wrong.append(f"{name}:{line} imports {module}")
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            # builtin open(...), or <path>.read_text(...) etc. Calls through
            # an injected file system (caps.manifest_model.ManifestFiles, named
            # ``files``) are the point, and a cursor codec's .open is no file.
            if isinstance(func, ast.Name) and func.id == "open":
                wrong.append(f"{name}:{node.lineno} calls open()")
            elif isinstance(func, ast.Attribute) and func.attr in FILE_CALLS - allowed:
                receiver = ast.unparse(func.value)
                if receiver.split(".")[-1] == "files" or (func.attr == "open" and "codec" in receiver):
                    continue
                wrong.append(f"{name}:{node.lineno} calls {receiver}.{func.attr}()")
    assert wrong == []


# The MCP gateway sits above net/, like interop/: nothing below it imports
# it, its mapping module (mcp/tools.py) does no I/O and needs no SDK, and
# the SDK itself is loaded only when an MCP command runs.
_BELOW_MCP = ("wire", "schema", "caps", "peer", "dump", "files", "net")


def test_nothing_below_the_gateway_imports_it() -> None:
    wrong = []
    for package in _BELOW_MCP:
        for path in sorted((SRC / package).rglob("*.py")):
            for module, line in _imports(path):
                if module.startswith("ampcap.mcp") or module.split(".")[0] in ("mcp", "mcp_types", "hypercorn"):
                    wrong.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    assert wrong == []


def test_the_tool_mapping_is_sans_io() -> None:
    imports = [module for module, _ in _imports(SRC / "mcp" / "tools.py")]
    assert not [m for m in imports if m.split(".")[0] in FORBIDDEN_LIBRARIES | FILE_LIBRARIES | {"mcp", "mcp_types"}]
    assert not [m for m in imports if m.startswith(("ampcap.net", "ampcap.cli", "ampcap.files"))]


def test_help_and_serve_do_not_load_the_mcp_sdk() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom ampcap.cli.main import build_parser\nbuild_parser().parse_args(['serve', '--demo'])\n"
            "import ampcap.mcp, ampcap.cli.serve\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'hypercorn')], 'loaded'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# The daemon's serving half (issue 26: the executor, jobs, RFC 005
# delegation, the state store) is imported only when a daemon builds it
# (net/daemon/serving.py): nothing a daemon imports at module level reaches it, so
# a client-only daemon never loads it. tests/cli/test_startup_imports.py
# checks the same on a real call; this names the import that breaks it.
SERVING_HALF = ("ampcap.net.daemon.serving", "ampcap.net.daemon.jobs", "ampcap.net.daemon.durable",
                "ampcap.peer.executor", "ampcap.peer.delegated", "ampcap.peer.invoke_state", "ampcap.deleg", "ampcap.store")


def _module_file(module: str) -> Path | None:
    path = SRC.parent.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _eager_imports(path: Path) -> list[tuple[str, int]]:
    """The ampcap modules ``path`` imports when it is imported: module level,
    not under ``if TYPE_CHECKING:``, not inside functions or classes."""
    package = path.relative_to(SRC.parent).with_suffix("").parts[:-1]
    if path.name == "__init__.py":
        package = path.relative_to(SRC.parent).parts[:-1]
    found: list[tuple[str, int]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))
            elif isinstance(node, ast.Import):
                found.extend((alias.name, node.lineno) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1])
                    module = f"{base}.{node.module}" if node.module else base
                else:
                    module = node.module or ""
                found.append((module, node.lineno))
                # ``from . import relay``: the names may be modules themselves.
                found.extend((f"{module}.{alias.name}", node.lineno) for alias in node.names
                             if _module_file(f"{module}.{alias.name}") is not None)

    visit(ast.parse(path.read_text(), str(path)).body)
    return [(m, line) for m, line in found if m.split(".")[0] == "ampcap"]


def _loaded_by(root: str) -> dict[str, str]:
    """Every ampcap module importing ``root`` loads, with the import that brought it."""
    seen: dict[str, str] = {root: root}
    todo = [root]
    while todo:
        path = _module_file(todo.pop())
        assert path is not None
        for module, line in _eager_imports(path):
            parts = module.split(".")
            for depth in range(2, len(parts) + 1):  # a module's packages are imported first
                name = ".".join(parts[:depth])
                if name not in seen and _module_file(name) is not None:
                    seen[name] = f"{path.relative_to(SRC)}:{line}"
                    todo.append(name)
    return seen


def _within(seen: dict[str, str], packages: tuple[str, ...]) -> list[str]:
    return sorted(f"{where} loads {name}" for name, where in seen.items()
                  if any(name == s or name.startswith(s + ".") for s in packages))


def test_the_daemon_imports_its_serving_half_only_when_it_builds_it() -> None:
    seen = _loaded_by("ampcap.net.daemon.core")
    assert _within(seen, SERVING_HALF) == []
    assert {"ampcap.net.daemon.link", "ampcap.net.daemon.dispatch", "ampcap.net.transport.dial",
            "ampcap.net.features.forwarding_relay", "ampcap.net.features.session_routing", "ampcap.net.features.delegation",
            "ampcap.net.daemon.actionlog", "ampcap.net.daemon.config"} <= set(seen)


# The Python API (net/api/peer.py, which a client call imports) and the modules
# it was split into: none reaches the serving half or the manifest model,
# which load where capabilities are offered.
OFFERING_ONLY = ("ampcap.caps.manifest", "ampcap.files.manifest", "ampcap.files.policy", "ampcap.caps.negotiate")


def test_the_python_api_loads_neither_the_serving_half_nor_the_manifest_model() -> None:
    seen = _loaded_by("ampcap.net.api.peer")
    assert _within(seen, (*SERVING_HALF, *OFFERING_ONLY)) == []
    assert {"ampcap.net.api.remote", "ampcap.net.api.local_capabilities", "ampcap.net.daemon.core"} <= set(seen)


# No import circle anywhere in src/ (issue 31): every import statement
# counts, wherever it stands (module level, inside a function, under ``if
# TYPE_CHECKING:``), since each is a dependency all the same: a type hint on
# a class ties a module to the module that defines it.


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every ampcap module → the ampcap modules it imports anywhere in its
    text: relative imports resolved, and ``from pkg import name`` counted as
    an import of ``pkg.name`` when that is a module (else of ``pkg``)."""
    files = {_module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names if alias.name in files)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: package.count(".") + 2 - node.level]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    if f"{module}.{alias.name}" in files:
                        deps.add(f"{module}.{alias.name}")
                    elif module in files:
                        deps.add(module)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, ..., a]``) through each strongly connected group
    of modules, found by depth-first search: an edge back to a module still
    on the path closes a circle."""
    cycles: list[list[str]] = []
    done: set[str] = set()
    covered: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path: list[str] = []
        on_path: dict[str, int] = {}
        stack: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        path.append(root)
        on_path[root] = 0
        while stack:
            node, todo = stack[-1]
            if todo:
                nxt = todo.pop(0)
                if nxt in on_path:
                    cycle = path[on_path[nxt]:] + [nxt]
                    if not set(cycle) <= covered:
                        cycles.append(cycle)
                        covered.update(cycle)
                elif nxt not in done:
                    on_path[nxt] = len(path)
                    path.append(nxt)
                    stack.append((nxt, sorted(graph[nxt])))
            else:
                stack.pop()
                done.add(node)
                path.pop()
                del on_path[node]
    return cycles


def test_the_cycle_finder_names_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_every_import_statement() -> None:
    graph = import_graph()
    # Under TYPE_CHECKING (net/daemon/ports.py) and inside a function (dial.py → http_client.py).
    assert "ampcap.net.daemon.link" in graph["ampcap.net.daemon.ports"]
    assert "ampcap.net.transport.http_client" in graph["ampcap.net.transport.dial"]
    # ``from ..features import forwarding_relay``: the submodule, not the package.
    assert "ampcap.net.features.forwarding_relay" in graph["ampcap.net.daemon.core"]


def test_no_import_cycles_in_src() -> None:
    cycles = find_cycles(import_graph())
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)
