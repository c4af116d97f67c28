"""The two local binding kinds: what runs in this process or as a child
of it (the bindings to other protocols are :mod:`.other_protocols`):

- :class:`PythonBinding`: ``module:function``, sync or ``async def``;
- :class:`CommandBinding`: an argv list; params go to stdin as JSON, the
  result comes back on stdout as JSON, bounded by ``timeout_ms``.

Nothing here runs anything: :mod:`ampcap.bindings.runner` executes
bindings at the trio edge. :func:`resolve_callable` only imports.

Calling convention for Python callables: ``fn(params)`` or, when the
function takes a second positional parameter (:func:`wants_context`),
``fn(params, context)`` with an object satisfying
:class:`~ampcap.caps.binding.context.InvocationContext`.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec

from ...errors import AmpError

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT_MS",
    "MAX_TIMEOUT_MS",
    "PythonBinding",
    "CommandBinding",
    "resolve_callable",
    "wants_context",
]

DEFAULT_COMMAND_TIMEOUT_MS = 30_000
# The bound on every binding's timeout_ms, the other protocols' too
# (:mod:`.other_protocols` imports it from here; nothing goes the other way).
MAX_TIMEOUT_MS = 24 * 3600 * 1000


class PythonBinding(msgspec.Struct, frozen=True, kw_only=True):
    """``target`` is ``package.module:function`` (dotted attribute path allowed)."""

    target: str
    timeout_ms: int | None = None
    # Directories (the manifest's ``python_path``) to make importable first.
    search_path: tuple[Path, ...] = ()
    # A quick plain function that never blocks (pure computation) may run on
    # the event loop itself: no worker-thread handoff, which costs more than
    # such a function does. It cannot be timed out or cancelled mid-call.
    inline: bool = False

    kind = "python"

    def __post_init__(self) -> None:
        module, sep, attr = self.target.partition(":")
        if not sep or not module or not attr or any(not p.isidentifier() for p in module.split(".") + attr.split(".")):
            raise AmpError(4001, f"python binding must be 'module:function', not {self.target!r}")
        _check_timeout(self.timeout_ms)

    def describe(self) -> str:
        return f"{self.target} (inline)" if self.inline else self.target


class CommandBinding(msgspec.Struct, frozen=True, kw_only=True):
    """Run ``argv`` (no shell); params JSON on stdin, result JSON on stdout."""

    argv: tuple[str, ...]
    timeout_ms: int = DEFAULT_COMMAND_TIMEOUT_MS
    cwd: Path | None = None
    env: Mapping[str, str] = msgspec.field(default_factory=lambda: MappingProxyType({}))
    max_output_bytes: int = 4 << 20
    # The tail of stderr goes to the local log on a failure; it reaches the
    # caller (error details) only when the manifest says so, because stderr
    # may hold paths, configuration or secrets a remote peer should not see.
    stderr_to_caller: bool = False

    kind = "command"

    def __post_init__(self) -> None:
        if not self.argv or any(not isinstance(a, str) or "\x00" in a for a in self.argv) or not self.argv[0]:
            raise AmpError(4001, "command binding needs a non-empty list of strings")
        _check_timeout(self.timeout_ms)
        if not isinstance(self.env, MappingProxyType):
            msgspec.structs.force_setattr(self, "env", MappingProxyType(dict(self.env)))

    def describe(self) -> str:
        return " ".join(self.argv)


def _check_timeout(ms: int | None) -> None:
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int) or not 0 < ms <= MAX_TIMEOUT_MS):
        raise AmpError(4001, f"timeout_ms must be an integer in 1..{MAX_TIMEOUT_MS}")


def resolve_callable(target: str, search_path: tuple[Path, ...] = ()) -> Callable[..., Any]:
    """Import ``module:attr.path`` and return the callable (4001 if absent).

    Importing runs module top-level code; only manifests the operator chose
    name these modules, the same trust as any Python import. Directories in
    ``search_path`` are added to ``sys.path`` (once) before importing.
    """
    for directory in reversed(search_path):
        entry = str(directory)
        if entry not in sys.path:
            sys.path.insert(0, entry)
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except SystemExit as exc:  # a module that exits when imported must not end the daemon
        raise AmpError(4001, f"cannot import {module_name!r}: it called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise AmpError(4001, f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AmpError(4001, f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise AmpError(4001, f"{target!r} is not callable")
    return obj


def wants_context(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` accepts a second positional argument (the context)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    positional = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2
