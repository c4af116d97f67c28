"""A capability's ``binding`` key: a local binding (``python`` or
``command``, with their options), the tables of the bindings to other
protocols (``[capability.binding.mcp|http|grpc]``, read by
:mod:`.tables`), or several of them, tried in R17's
order or the capability's ``binding_order`` (a :class:`Fallback`).

Sans-I/O: what it checks on disk (a command's program and directory) goes
through the injected :class:`ManifestFiles`. Split out of the capability
reader (:mod:`ampcap.caps.capability_table`); problems go to its
``problem(message, key)``, with the key that holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import AmpError
from ..manifest_model import ManifestFiles, string_list
from .kinds import Binding
from .local import CommandBinding, PythonBinding, resolve_callable
from .other_protocols import Fallback, McpServer
from .tables import REMOTE_KINDS, Problem, binding_order, read_remote_binding

__all__ = ["BindingSection"]

_LOCAL_BINDING_KEYS = frozenset({"python", "command", "timeout_ms", "env", "cwd", "inline", "stderr_to_caller"})
_BINDING_KEYS = _LOCAL_BINDING_KEYS | set(REMOTE_KINDS)


class BindingSection:
    """Reads the ``binding`` of each capability of one manifest: the
    ``[mcp_server.NAME]`` tables, the directories and the checks are the
    manifest's, the same for all of them."""

    __slots__ = ("problem", "files", "servers", "search_path", "check_bindings")

    def __init__(self, problem: Problem, files: ManifestFiles | None, servers: Mapping[str, McpServer],
                 search_path: tuple[Path, ...], check_bindings: bool) -> None:
        self.problem = problem
        self.files = files
        self.servers = servers
        self.search_path = search_path
        self.check_bindings = check_bindings

    def read(self, raw: Any, order: Any) -> Binding | None:
        """The capability's binding, or a :class:`Fallback` of several in
        the order they are tried (R17, or ``binding_order``)."""
        if raw is None:
            self.problem("missing: binding = { python = \"module:function\" }, { command = [...] } or a "
                         "[capability.binding.mcp|http|grpc] table", "binding")
            return None
        if not isinstance(raw, dict):
            self.problem("must be a table", "binding")
            return None
        for key in sorted(set(raw) - _BINDING_KEYS):
            self.problem("unknown key (expected python, command, timeout_ms, env, cwd, inline, stderr_to_caller, "
                         "or a table mcp, http, grpc)", f"binding.{key}")
        found: dict[str, Any] = {}
        failed = False
        for kind in REMOTE_KINDS:
            if kind in raw:
                base = self.files.base_dir if self.files else None
                one = read_remote_binding(kind, raw[kind], self.problem, self.servers, base, self.check_bindings)
                failed |= one is None
                found[kind] = one
        local = {k: v for k, v in raw.items() if k in _LOCAL_BINDING_KEYS}
        if local or not found:
            one = self._local(local)
            failed |= one is None
            if one is not None:
                found[one.kind] = one
        kinds = binding_order(order, list(found), self.problem)
        if failed or kinds is None:
            return None
        if len(kinds) == 1:
            chosen: Binding = found[kinds[0]]
            return chosen
        return Fallback(bindings=tuple(found[k] for k in kinds))

    def _local(self, raw: Mapping[str, Any]) -> Binding | None:
        if ("python" in raw) == ("command" in raw):
            self.problem("needs exactly one of 'python' or 'command' (or a [capability.binding.mcp|http|grpc] "
                         "table)", "binding")
            return None
        timeout = raw.get("timeout_ms")
        try:
            if "python" in raw:
                target = raw["python"]
                if not isinstance(target, str):
                    self.problem("must be a string 'module:function'", "binding.python")
                    return None
                if "env" in raw or "cwd" in raw or "stderr_to_caller" in raw:
                    self.problem("env, cwd and stderr_to_caller apply to command bindings only", "binding")
                inline = raw.get("inline", False)
                if not isinstance(inline, bool):
                    self.problem("must be true or false", "binding.inline")
                    return None
                if inline and timeout is not None:
                    self.problem("an inline function cannot be timed out: drop timeout_ms or inline",
                                 "binding")
                    return None
                binding: Binding = PythonBinding(target=target, timeout_ms=timeout,
                                                 search_path=self.search_path, inline=inline)
                if self.check_bindings:
                    resolve_callable(target, self.search_path)
                return binding
            if "inline" in raw:
                self.problem("inline applies to python bindings only", "binding.inline")
            argv = string_list(raw["command"])
            if argv is None:
                self.problem("must be a list of strings, e.g. [\"prog\", \"--flag\"]", "binding.command")
                return None
            env = raw.get("env", {})
            if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
                self.problem("must be a table of strings", "binding.env")
                return None
            cwd = raw.get("cwd")
            if cwd is not None and not isinstance(cwd, str):
                self.problem("must be a string path", "binding.cwd")
                return None
            stderr_to_caller = raw.get("stderr_to_caller", False)
            if not isinstance(stderr_to_caller, bool):
                self.problem("must be true or false", "binding.stderr_to_caller")
                return None
            # A process cannot be given NUL in its arguments, environment or
            # directory: say so now rather than fail every invoke later.
            for key, texts in (("command", argv), ("env", [*env, *env.values()]), ("cwd", [cwd or ""])):
                if any("\x00" in t for t in texts):
                    self.problem("must not contain NUL characters", f"binding.{key}")
                    return None
            files = self.files
            base = files.base_dir if files else None
            workdir = (base / cwd if base else Path(cwd)) if cwd else base
            if self.check_bindings and files is not None:
                if cwd and workdir is not None and not files.is_dir(workdir):
                    # The runner would fail every invoke (5001) trying to start there.
                    self.problem(f"{str(workdir)!r} is not a directory", "binding.cwd")
                elif argv and (missing := files.missing_program(argv[0], workdir, env)):
                    self.problem(missing, "binding.command")
            kwargs: dict[str, Any] = {"argv": tuple(argv), "env": env, "cwd": workdir,
                                      "stderr_to_caller": stderr_to_caller}
            if timeout is not None:
                kwargs["timeout_ms"] = timeout
            return CommandBinding(**kwargs)
        except AmpError as exc:
            self.problem(exc.message, "binding")
            return None
